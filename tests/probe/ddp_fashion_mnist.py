"""An ordinary PyTorch DDP training script (Gloo, CPU): a small CNN on Fashion-MNIST read by
torchvision.datasets.FashionMNIST through a plain DataLoader with a DistributedSampler. Nothing
in it knows about Stoker: the probe tests run it under `python3 -m stoker_probe`.

Ranks come from the torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): Debian's
`python3 -m torch.distributed.run` dies under Python 3.11, so the tests start the ranks
themselves. --slow-rank R --slow-ms MS makes one rank's dataset sleep per sample (an input
pipeline that cannot keep up); the script prints one line per epoch, "rank R epoch E steps N",
and at the end "rank R max_step_s S" (its slowest iteration).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


class SlowDataset(torch.utils.data.Dataset):
    def __init__(self, inner, sleep_s):
        self.inner = inner
        self.sleep_s = sleep_s

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        time.sleep(self.sleep_s)
        return self.inner[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 13 * 13, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="root holding FashionMNIST/raw/")
    p.add_argument("--samples", type=int, default=4096, help="use the first N training images")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = datasets.FashionMNIST(a.data, train=True, download=False, transform=transforms.ToTensor())
    data = Subset(data, range(min(a.samples, len(data))))
    if rank == a.slow_rank:
        data = SlowDataset(data, a.slow_ms / 1000.0)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=a.batch_size, sampler=sampler, num_workers=0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    max_step = 0.0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        steps = 0
        last = time.perf_counter()
        for images, labels in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            steps += 1
            now = time.perf_counter()
            max_step = max(max_step, now - last)
            last = now
        print(f"rank {rank} epoch {epoch} steps {steps} loss {loss.item():.3f}", flush=True)
    print(f"rank {rank} max_step_s {max_step:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
