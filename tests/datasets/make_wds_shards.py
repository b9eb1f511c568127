#!/usr/bin/python3
"""WebDataset shards from an image folder (torchvision layout): OUT/PREFIX-000000.tar, ... each with
<key>.jpg (or .png, the file's bytes unchanged) and <key>.cls (the class index as text), samples
shuffled across shards with --seed, written the way webdataset's TarWriter writes (Python's
tarfile, pax headers from float mtimes). Also writes OUT/keys.json: {key: source path}.

    make_wds_shards.py FOLDER OUT [--per-shard 500] [--prefix train] [--seed 0]
"""
import argparse
import io
import json
import os
import random
import tarfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("out")
    ap.add_argument("--per-shard", type=int, default=500)
    ap.add_argument("--prefix", default="train")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    classes = sorted(e.name for e in os.scandir(a.folder) if e.is_dir())
    samples = []
    for c, name in enumerate(classes):
        for root, _, files in sorted(os.walk(os.path.join(a.folder, name), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    samples.append((os.path.join(root, f), c))
    random.Random(a.seed).shuffle(samples)
    os.makedirs(a.out, exist_ok=True)
    keys = {}
    shards = 0
    for start in range(0, len(samples), a.per_shard):
        with tarfile.open(os.path.join(a.out, f"{a.prefix}-{shards:06d}.tar"), "w") as tf:
            for i, (path, label) in enumerate(samples[start:start + a.per_shard], start):
                key = f"{i:08d}"
                keys[key] = path
                ext = os.path.splitext(path)[1].lower().lstrip(".")
                with open(path, "rb") as f:
                    data = f.read()
                for member, payload in ((f"{key}.{ext}", data), (f"{key}.cls", str(label).encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(payload)
                    info.mtime = time.time()
                    tf.addfile(info, io.BytesIO(payload))
        shards += 1
    with open(os.path.join(a.out, "keys.json"), "w") as f:
        json.dump(keys, f)
    print(f"{a.out}: {len(samples)} samples in {shards} shards {a.prefix}-{{000000..{shards - 1:06d}}}.tar")


if __name__ == "__main__":
    main()
