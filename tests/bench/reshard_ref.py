#!/usr/bin/python3
"""The peers' way to reshard a ranks checkpoint, as a reference for timing:
load every shard into memory with torch, cat each tensor, split it for the new
world size, save the new rank files (what ferrotorch's reshard and DCP's
dcp_to_torch_save do). usage: reshard_ref.py SRC DST M"""
import json
import os
import sys

import torch

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64, "I64": torch.int64}
NAME = {v: k for k, v in DT.items()}


def load(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for k, e in header.items():
        if k == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[k] = torch.frombuffer(data, dtype=DT[e["dtype"]], count=(b - a) // torch.empty(0, dtype=DT[e["dtype"]]).element_size(),
                                  offset=a).reshape(e["shape"]) if b > a else torch.empty(e["shape"], dtype=DT[e["dtype"]])
    return out


def save(path, tensors, order=None, metadata=None):
    """A safetensors file of `tensors` (name -> torch tensor) in `order` (default: sorted), fsynced."""
    header, offset = ({"__metadata__": metadata} if metadata else {}), 0
    order = sorted(tensors) if order is None else order
    for k in order:
        t = tensors[k]
        nbytes = t.numel() * t.element_size()
        header[k] = {"dtype": NAME[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for k in order:
            f.write(tensors[k].contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        f.flush()
        os.fsync(f.fileno())


def main():
    src, dst, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
    meta = json.load(open(os.path.join(src, "metadata.json")))
    shards = [load(os.path.join(src, f"rank_{r}.safetensors")) for r in range(meta["num_ranks"])]
    os.makedirs(dst, exist_ok=True)
    out = [dict() for _ in range(m)]
    specs = {}
    for name, spec in meta["tensor_specs"].items():
        dim = spec["shard_dim"]
        if dim is None:
            for r in range(m):
                out[r][name] = shards[0][name]
            specs[name] = spec
            continue
        full = torch.cat([s[name] for s in shards], dim)
        total = full.shape[dim]
        sizes = [total // m + (1 if i < total % m else 0) for i in range(m)]
        for r, part in enumerate(torch.split(full, sizes, dim)):
            out[r][name] = part
        specs[name] = {"full_shape": spec["full_shape"], "shard_dim": dim, "shard_sizes": sizes}
    for r in range(m):
        save(os.path.join(dst, f"rank_{r}.safetensors"), out[r])
    with open(os.path.join(dst, "metadata.json"), "w") as f:
        json.dump({"num_ranks": m, "tensor_specs": specs}, f, indent=2)


if __name__ == "__main__":
    main()
