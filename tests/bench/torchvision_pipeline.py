#!/usr/bin/python3
"""The peer: torchvision's ImageFolder + PyTorch's DataLoader (PIL decode), the train or the eval
pipeline into float32 NCHW batches. Prints {"images_per_s": ...} of the fastest of --epochs epochs
(the first warms the page cache). With --device cuda:N each batch goes to the GPU as a training
loop's would: pinned by the DataLoader (pin_memory=True), copied with non_blocking=True.

    torchvision_pipeline.py ROOT --pipeline train|eval --workers N [--batch 64] [--epochs 2] [--device cpu]
"""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--pipeline", choices=["train", "eval"], default="train")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    norm = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    if a.pipeline == "train":
        t = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(), norm])
    else:
        t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), norm])
    torch.set_num_threads(1)  # the workers are the parallelism, as in a real job
    ds = datasets.ImageFolder(a.root, transform=t)
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                        persistent_workers=a.workers > 0, pin_memory=cuda)
    best = 0.0
    for _ in range(a.epochs):
        start, n = time.perf_counter(), 0
        for images, labels in loader:
            if cuda:
                images = images.to(a.device, non_blocking=True)
                labels = labels.to(a.device, non_blocking=True)
            n += images.shape[0]
        if cuda:
            torch.cuda.synchronize()
        best = max(best, n / (time.perf_counter() - start))
    print(json.dumps({"pipeline": a.pipeline, "workers": a.workers, "images_per_s": best, "torch": torch.__version__,
                      "device": a.device}))


if __name__ == "__main__":
    main()
