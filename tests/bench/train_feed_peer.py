#!/usr/bin/env python3
"""The peer of `stoker-demo-trainer --model cnn --json`: the same CNN, optimizer and step on
Fashion-MNIST, fed by PyTorch's DataLoader(pin_memory=True, num_workers=k) over the same float
images (pixels / 255, [N, 1, 28, 28]) with .to(device, non_blocking=True), as a PyTorch user writes
it. Prints one JSON line per epoch with the same fields: samples/s and the share of the epoch the
training loop spent waiting for data (in the iterator and the copy call).

    train_feed_peer.py --device cuda:0 --workers 4 --epochs 2
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_file import read_idx  # noqa: E402


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise SystemExit(f"error: {stem}(.gz) not found in {data_dir}")


def model():
    # The layers of stoker-demo-trainer's --model cnn.
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0 = whole epoch)")
    p.add_argument("--feeder", choices=["dataloader", "stoker"], default="dataloader")
    p.add_argument("--stoker-build", default="", help="a build folder whose python/ holds the stoker package")
    a = p.parse_args()

    torch.manual_seed(a.seed)
    images = torch.from_numpy(read_idx(find(a.data_dir, "train-images-idx3-ubyte")).copy()).float().div_(255).unsqueeze(1)
    labels = torch.from_numpy(read_idx(find(a.data_dir, "train-labels-idx1-ubyte")).astype(np.int64))
    if a.feeder == "stoker":
        if a.stoker_build:
            sys.path.insert(0, os.path.join(a.stoker_build, "python"))
        import stoker
        # The same samples (pixels / 255 as float32, [N, 1, 28, 28]) read by the core, on the device.
        loader = stoker.Loader(f"fashion-mnist:{a.data_dir}", batch_size=a.batch_size, shuffle=True,
                               num_workers=a.workers, device=a.device)
        feeder = f"python-stoker-{a.workers}w"
    else:
        dataset = torch.utils.data.TensorDataset(images, labels)
        loader = torch.utils.data.DataLoader(dataset, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                             pin_memory=a.device.startswith("cuda"),
                                             persistent_workers=a.workers > 0)
        feeder = f"dataloader-{a.workers}w"
    device = torch.device(a.device)
    net = model().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=a.lr)
    for epoch in range(a.epochs):
        seen, wait, loss_sum, correct, steps = 0, 0.0, 0.0, 0, 0
        start = time.perf_counter()
        it = iter(loader)
        while True:
            asked = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            wait += time.perf_counter() - asked
            optimizer.zero_grad()
            logits = net(x)
            loss = nn.functional.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * y.size(0)  # the two per-step syncs stoker-demo-trainer has too
            correct += (logits.argmax(1) == y).sum().item()
            seen += y.size(0)
            steps += 1
            if a.max_steps and steps >= a.max_steps:
                break
        seconds = time.perf_counter() - start
        print(json.dumps({"feeder": feeder, "model": "cnn", "device": a.device, "epoch": epoch,
                          "batch_size": a.batch_size, "workers": a.workers, "samples": seen, "seconds": seconds,
                          "samples_per_s": seen / seconds, "data_wait_share": wait / seconds,
                          "loss": loss_sum / max(seen, 1), "train_accuracy": correct / max(seen, 1)}), flush=True)


if __name__ == "__main__":
    main()
