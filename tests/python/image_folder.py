"""stoker.Loader on a folder of real photos (python3-skimage's, cut by make_photo_folder.py): eval
batches equal `stoker dataset export`'s bit for bit and stay within 1/255 of torchvision's
ImageFolder + the same transforms; train batches (random crops and flips drawn from generator_seed)
equal the export's for the same seed, also widened after the workers (normalize_on="device"); torchvision's resnet18(num_classes=10) takes 20 steps on them."""

import os
import subprocess
import sys
import tempfile

import torch
import torchvision
from torchvision import transforms as T

import stoker
from common import read_safetensors, result

torch.set_num_threads(2)
STOKER = os.environ["STOKER_CLI"]
HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = "Resize(80),CenterCrop(64),Normalize(imagenet)"
TRAIN = "RandomResizedCrop(64),RandomHorizontalFlip(),Normalize(imagenet)"

with tempfile.TemporaryDirectory() as tmp:
    photos = os.path.join(tmp, "photos")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "datasets", "make_photo_folder.py"), photos, "--classes",
                    "4", "--per-class", "6", "--size", "200x150"], check=True, capture_output=True)
    spec = f"imagefolder:{photos}"

    def exported(transforms, seed=0):
        out = os.path.join(tmp, "export.safetensors")
        subprocess.run([STOKER, "dataset", "export", spec, out, "--transforms", transforms, "--seed", str(seed)],
                       check=True, capture_output=True)
        return read_safetensors(out)

    # Eval: the loader's batches are the export's, and torchvision's within 1/255 (in [0,1] units).
    loader = stoker.Loader(spec, batch_size=5, transforms=EVAL, num_workers=2)
    images = torch.cat([x for x, _ in loader])
    labels = torch.cat([y for _, y in loader])
    ref = exported(EVAL)
    assert torch.equal(images, ref["images"]) and torch.equal(labels, ref["labels"]), "eval batches differ from the export"
    norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    tv = torchvision.datasets.ImageFolder(photos, transform=T.Compose([T.Resize(80), T.CenterCrop(64), T.ToTensor(), norm]))
    tv_images = torch.stack([tv[i][0] for i in range(len(tv))])
    assert [tv[i][1] for i in range(len(tv))] == labels.tolist()
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    worst = ((images - tv_images).abs() * std).max().item() * 255  # in 0-255 levels
    assert worst <= 1.0 + 1e-3, f"eval differs from torchvision by {worst:.2f}/255"
    # Strides cross as the core made them: row-major by default, channels-last when asked.
    assert images.is_contiguous() and next(iter(loader))[0].stride() == (3 * 64 * 64, 64 * 64, 64, 1)
    nhwc = next(iter(stoker.Loader(spec, batch_size=5, transforms=EVAL, memory_format="nhwc")))[0]
    assert nhwc.stride() == (3 * 64 * 64, 1, 3 * 64, 3) and torch.equal(nhwc, ref["images"][:5]), nhwc.stride()

    # Train: random crops and flips drawn from (generator_seed, epoch, sample), as the export draws them.
    train = stoker.Loader(spec, batch_size=8, transforms=TRAIN, generator_seed=9, num_workers=2, drop_last=True)
    xs, ys = [], []
    it = iter(train)
    for x, y in it:
        xs.append(x)
        ys.append(it.indices)
    order = torch.cat(ys)
    ref = exported(TRAIN, seed=9)
    assert torch.equal(torch.cat(xs), ref["images"][order]), "train batches differ from the export for the same seed"
    # normalize_on="device": u8 planes from the workers, widened afterwards (on cpu by the host):
    # the same bytes, and the loader says where the work went.
    widened = stoker.Loader(spec, batch_size=8, transforms=TRAIN, generator_seed=9, num_workers=2, drop_last=True,
                            normalize_on="device")
    it = iter(widened)
    for b, (x, _) in enumerate(it):
        assert torch.equal(x.view(torch.int32), xs[b].view(torch.int32)), f"normalize_on device: batch {b} differs"
    assert any("as u8" in n for n in widened.describe()["notes"]), widened.describe()["notes"]
    try:
        stoker.Loader(spec, transforms=TRAIN, normalize_on="gpu")
        raise AssertionError("normalize_on='gpu' was accepted")
    except ValueError as e:
        assert "normalize_on" in str(e) and "device" in str(e), e

    # A small torchvision model trains on the batches.
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train.set_epoch(1)
    steps, losses = 0, []
    while steps < 20:
        for x, y in train:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            steps += 1
            if steps == 20:
                break
    assert all(torch.isfinite(torch.tensor(losses))), losses
    # WebDataset shards of the same photos orders its epochs itself (shard after shard): an epoch
    # stopped after 2 batches resumes from state_dict with each sample once; on another world size
    # that order cannot be dealt again, which is refused.
    shards = os.path.join(tmp, "shards")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "datasets", "make_wds_shards.py"), photos, shards,
                    "--per-shard", "8"], check=True, capture_output=True)
    wds = f"wds:{shards}/train-{{000000..000002}}.tar"
    first = stoker.Loader(wds, batch_size=4, shuffle=True, seed=2, transforms=EVAL, drop_last=False)
    assert first.describe()["own_order"] is True
    it = iter(first)
    seen = []
    for _ in range(2):
        next(it)
        seen += it.indices.tolist()
    state = first.state_dict()
    again = stoker.Loader(wds, batch_size=4, shuffle=True, seed=2, transforms=EVAL, drop_last=False)
    again.load_state_dict(state)
    it = iter(again)
    for _ in it:
        seen += it.indices.tolist()
    assert sorted(seen) == list(range(24)), f"the resumed WebDataset epoch repeated or skipped samples: {sorted(seen)}"
    try:
        stoker.Loader(wds, batch_size=4, shuffle=True, seed=2, transforms=EVAL, rank=0, world_size=2).load_state_dict(state)
        raise AssertionError("a WebDataset epoch was resumed onto another world size")
    except ValueError as e:
        assert "its own order" in str(e), e
    result(eval_worst_levels=round(worst, 3), samples=len(images), steps=steps, last_loss=losses[-1], wds_resumed=len(seen))
