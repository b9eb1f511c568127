#!/usr/bin/python3
"""Builds an ImageNet-like image folder from real photographs (see photo_sources.py):
OUT/<class>/<class>_<i>.jpg, one class per source photo. Each image is a random crop of its photo
(a quarter to all of it, landscape or portrait), possibly mirrored, resized to about WxH and saved
as a JPEG at --quality, so files differ the way a camera's do. Deterministic for a --seed.

    make_photo_folder.py OUT [--classes 10] [--per-class 500] [--size 500x375] [--quality 90] [--png 0]
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import photo_sources  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=500)
    ap.add_argument("--size", default="500x375", help="WxH of landscape images (portrait ones are HxW)")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--png", type=float, default=0.0, help="share of images saved as PNG instead")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from PIL import Image
    w, h = (int(v) for v in a.size.split("x"))
    rng = random.Random(a.seed)
    sources = photo_sources.photos(a.classes)
    if len(sources) < a.classes:
        sys.exit(f"only {len(sources)} source photos for {a.classes} classes")
    total = 0
    for name, img in sources:
        os.makedirs(os.path.join(a.out, name), exist_ok=True)
        W, H = img.size
        for i in range(a.per_class):
            portrait = rng.random() < 0.25
            ow, oh = (h, w) if portrait else (w, h)
            # A crop of the photo with the output's aspect, a quarter to all of the largest such.
            k = min(W / ow, H / oh) * rng.uniform(0.5, 1.0)
            cw, ch = max(8, int(ow * k)), max(8, int(oh * k))
            x, y = rng.randint(0, W - cw), rng.randint(0, H - ch)
            sample = img.crop((x, y, x + cw, y + ch)).resize((ow, oh), Image.BICUBIC)
            if rng.random() < 0.5:
                sample = sample.transpose(Image.FLIP_LEFT_RIGHT)
            jitter = rng.randint(-6, 6)  # slightly different sizes, like real photos
            sample = sample.resize((max(16, ow + jitter), max(16, oh + jitter)), Image.BICUBIC)
            if rng.random() < a.png:
                sample.save(os.path.join(a.out, name, f"{name}_{i:05d}.png"))
            else:
                sample.save(os.path.join(a.out, name, f"{name}_{i:05d}.jpg"), quality=a.quality)
            total += 1
    print(f"{a.out}: {total} images in {len(sources)} classes")


if __name__ == "__main__":
    main()
