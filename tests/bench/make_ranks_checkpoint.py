#!/usr/bin/python3
"""Writes a ranks-layout checkpoint (metadata.json + rank_<r>.safetensors, the
ferrotorch schema) of about SIZE bytes, independently of Stoker: numpy and the
safetensors rules only. Tensors are split on dim 0 by the seed's even rule,
some on dim 1, one replicated, one uneven on purpose.

usage: make_ranks_checkpoint.py DIR --ranks N --size-mib M [--seed S]
"""
import argparse
import json
import os

import numpy as np


def even_split(total, parts):
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def write_safetensors(path, tensors):
    # Official order: descending alignment (dtype), then name; all F32 here.
    header, offset = {}, 0
    for name in sorted(tensors):
        a = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name]).tobytes())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--size-mib", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.dir, exist_ok=True)

    # A transformer-like mix: big [4096, 1024] matrices (~16 MiB each) until
    # the size is reached, a few split on dim 1, norms replicated.
    count = max(1, args.size_mib // 16)
    specs, shards = {}, [dict() for _ in range(args.ranks)]
    for i in range(count):
        name = f"layers.{i:04d}.weight"
        full = rng.standard_normal((4096, 1024), dtype=np.float32)
        dim = 1 if i % 4 == 3 else 0
        sizes = even_split(full.shape[dim], args.ranks)
        specs[name] = {"full_shape": list(full.shape), "shard_dim": dim, "shard_sizes": sizes}
        start = 0
        for r, s in enumerate(sizes):
            shards[r][name] = full[start:start + s] if dim == 0 else full[:, start:start + s]
            start += s
    norm = rng.standard_normal((1024,), dtype=np.float32)
    specs["norm.weight"] = {"full_shape": [1024], "shard_dim": None, "shard_sizes": []}
    for r in range(args.ranks):
        shards[r]["norm.weight"] = norm
    # Uneven: all of it on the first rank.
    odd = rng.standard_normal((10, 3), dtype=np.float32)
    specs["head.bias"] = {"full_shape": [10, 3], "shard_dim": 0, "shard_sizes": [10] + [0] * (args.ranks - 1)}
    for r in range(args.ranks):
        shards[r]["head.bias"] = odd if r == 0 else odd[:0]

    for r in range(args.ranks):
        write_safetensors(os.path.join(args.dir, f"rank_{r}.safetensors"), shards[r])
    with open(os.path.join(args.dir, "metadata.json"), "w") as f:
        json.dump({"num_ranks": args.ranks, "tensor_specs": specs}, f, indent=2)


if __name__ == "__main__":
    main()
