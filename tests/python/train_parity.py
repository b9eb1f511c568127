"""A CNN on Fashion-MNIST trained through stoker.Loader and through DataLoader(shuffle=True) with the
same seed: identical sample indices per batch and identical losses for the first 50 steps
(deterministic CPU), then two epochs through Stoker to a test accuracy of at least 85 %."""

import sys

import torch

import stoker
from common import SmallCnn, fashion, result

torch.set_num_threads(1)
SEED, BATCH, STEPS = 7, 64, 50
images, labels = fashion("train")


def make_model():
    torch.manual_seed(0)
    model = SmallCnn()
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


loader = stoker.Loader("fashion-mnist", batch_size=BATCH, shuffle=True, seed=SEED, num_workers=1)
assert len(loader) == (60000 + BATCH - 1) // BATCH, len(loader)  # drop_last=False, as DataLoader's default

# The same data as torchvision's FashionMNIST + ToTensor, bit for bit.
first = loader.describe()
assert first["fields"][0]["name"] == "images" and first["fields"][1]["name"] == "labels", first

# DataLoader's prefetch_factor (default 2) counts batches a worker; Stoker's prefetch is the ring.
def ring(**kw):
    with stoker.Loader("synthetic:64,4", **kw) as l:
        return l.describe()["options"]["prefetch"]


assert ring(num_workers=15) == 30 and ring(num_workers=3) == 8 and ring(num_workers=3, prefetch_factor=4) == 12
assert ring(num_workers=15, prefetch=3) == 3 and ring(options={"prefetch": 5}) == 5, "prefetch given: kept"

# DataLoader peer: RandomSampler drawing from Generator().manual_seed(seed + epoch), Stoker's rule.
peer = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(images, labels), batch_size=BATCH,
    sampler=torch.utils.data.RandomSampler(range(len(images)), generator=torch.Generator().manual_seed(SEED + 0)))

stoker_model, stoker_opt = make_model()
peer_model, peer_opt = make_model()
stoker_losses, peer_losses = [], []
it = iter(loader)
for i, ((x, y), (px, py)) in enumerate(zip(it, peer)):
    if i == STEPS:
        break
    assert torch.equal(x, px) and torch.equal(y, py), f"batch {i}: Stoker's samples differ from DataLoader's"
    # Strides too: at::toDLPack makes the one-channel dim's stride 1, which looks channels-last to
    # the convolutions and rounded the 5th loss otherwise on an AVX-512 CPU (the binding's export
    # keeps the core's strides).
    assert x.stride() == px.stride(), f"batch {i}: strides {x.stride()} against DataLoader's {px.stride()}"
    stoker_losses.append(step(stoker_model, stoker_opt, x, y))
    peer_losses.append(step(peer_model, peer_opt, px, py))
assert stoker_losses == peer_losses, (stoker_losses[:5], peer_losses[:5])

# Indices: the whole epoch's order equals RandomSampler's, batch by batch through last_indices.
order0 = list(torch.utils.data.RandomSampler(range(60000), generator=torch.Generator().manual_seed(SEED)))
assert loader.order(0).tolist() == order0

# Two full epochs through Stoker (the iterator above is replaced: a new `for` starts epoch 1... so
# start over at 0 for the accuracy run).
model, opt = make_model()
loader.set_epoch(0)
seen_batches = 0
for epoch in range(2):
    expected = list(torch.utils.data.RandomSampler(range(60000), generator=torch.Generator().manual_seed(SEED + epoch)))
    it = iter(loader)
    got = []
    for x, y in it:
        got.extend(it.indices.tolist())
        step(model, opt, x, y)
        seen_batches += 1
    assert got == expected, f"epoch {epoch}: order differs from RandomSampler's"

# Each epoch's successor is made ahead of it (queued behind it in the core); another epoch than
# that one (set_epoch) drops those batches and serves its own order.
loader.set_epoch(5)
it = iter(loader)
got = []
for x, y in it:
    got.extend(it.indices.tolist())
assert got == list(torch.utils.data.RandomSampler(range(60000), generator=torch.Generator().manual_seed(SEED + 5)))

test_images, test_labels = fashion("test")
with torch.no_grad():
    accuracy = (model(test_images).argmax(1) == test_labels).float().mean().item()
assert accuracy >= 0.85, accuracy
result(steps_equal=len(stoker_losses), first_loss=stoker_losses[0], accuracy=accuracy, batches=seen_batches)
