#!/usr/bin/python3
"""torchvision's own output for an image folder, for Stoker's parity tests and benchmarks:
ImageFolder(ROOT, transform=Compose(...)) with Debian's python3-torchvision (PIL backend).

    torchvision_reference.py ROOT OUT_DIR [--transforms eval|u8-eval|TEXT] [--limit N] [--crops FILE]

writes OUT_DIR/images.npy (the transformed samples, stacked), OUT_DIR/labels.npy (int64) and
OUT_DIR/samples.json ({"classes": [...], "class_to_idx": {...}, "samples": [[path, label], ...]}).
TEXT uses Stoker's transform names, which are torchvision's. RandomResizedCrop(size) and
RandomHorizontalFlip() need --crops: a JSON list with, per sample, the [top, left, height, width,
flip] Stoker drew, applied with torchvision's own F.resized_crop and F.hflip.
"""
import argparse
import json
import os

import numpy as np
import torch
from torchvision import datasets, transforms
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

PRESETS = {
    "eval": "Resize(256),CenterCrop(224),Normalize(imagenet)",
    "u8-eval": "Resize(256),CenterCrop(224),ToDtype(u8)",
}


CROPS = []  # --crops: per sample [top, left, height, width, flip]
CURRENT = [0]  # the sample being transformed


class GivenResizedCrop:
    """RandomResizedCrop with the box drawn elsewhere: F.resized_crop, as RandomResizedCrop calls it."""

    def __init__(self, size):
        self.size = [size, size] if isinstance(size, int) else list(size)

    def __call__(self, img):
        top, left, height, width, _ = CROPS[CURRENT[0]]
        return F.resized_crop(img, top, left, height, width, self.size, InterpolationMode.BILINEAR)


class GivenFlip:
    def __call__(self, img):
        return F.hflip(img) if CROPS[CURRENT[0]][4] else img


def compose(text):
    steps, to_u8 = [], False
    for part in text.replace(" ", "").split("),"):
        part = part.rstrip(")")
        name, _, arg = part.partition("(")
        if name == "Resize":
            steps.append(transforms.Resize(eval(arg)))
        elif name == "CenterCrop":
            steps.append(transforms.CenterCrop(eval(arg)))
        elif name == "Normalize":
            assert arg == "imagenet"
            steps.append("normalize")
        elif name == "RandomResizedCrop":
            steps.append(GivenResizedCrop(eval(arg)))
        elif name == "RandomHorizontalFlip":
            steps.append(GivenFlip())
        elif name == "ToDtype":
            to_u8 = arg == "u8"
        else:
            raise SystemExit(f"unsupported here: {name}")
    out = []
    for s in steps:
        if s == "normalize":
            out += [transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
        else:
            out.append(s)
    if to_u8:
        out += [transforms.PILToTensor(), transforms.Lambda(lambda t: t.permute(1, 2, 0).contiguous())]
    elif not any(isinstance(s, transforms.ToTensor) for s in out):
        out.append(transforms.ToTensor())
    return transforms.Compose(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--transforms", default="eval")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--crops", help="JSON: per sample [top, left, height, width, flip]")
    a = ap.parse_args()
    if a.crops:
        with open(a.crops) as f:
            CROPS.extend(json.load(f))
    os.makedirs(a.out, exist_ok=True)
    ds = datasets.ImageFolder(a.root, transform=compose(PRESETS.get(a.transforms, a.transforms)))
    n = len(ds) if not a.limit else min(a.limit, len(ds))
    images, labels = [], []
    for i in range(n):
        CURRENT[0] = i
        x, y = ds[i]
        images.append(x.numpy())
        labels.append(y)
    np.save(os.path.join(a.out, "images.npy"), np.stack(images))
    np.save(os.path.join(a.out, "labels.npy"), np.array(labels, dtype=np.int64))
    with open(os.path.join(a.out, "samples.json"), "w") as f:
        json.dump({"classes": ds.classes, "class_to_idx": ds.class_to_idx, "samples": ds.samples[:n]}, f)
    print(f"{a.out}: {n} samples of {len(ds)}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
