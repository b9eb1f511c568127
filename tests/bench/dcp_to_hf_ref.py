#!/usr/bin/python3
"""The peers' way to turn a DCP checkpoint into HF safetensors shards, as a reference for timing:
what torch's dcp_to_torch_save does (read .metadata, allocate every tensor, load the whole
checkpoint into memory with DCP's own reader), then write transformers-style shards
(model-0000i-of-0000n.safetensors + index, greedy packing at MAX bytes) from those tensors.
Runs on Debian's torch 1.13 (DCP under torch.distributed._shard.checkpoint).
usage: dcp_to_hf_ref.py SRC DST [MAX_BYTES]"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "ckpt"), HERE]
from dcp_compat import dcp, torch  # noqa: E402  (torch 1.13's DCP under Python 3.11)
from reshard_ref import save  # noqa: E402  (the same safetensors writer as the reshard reference)

def main():
    src, dst = sys.argv[1], sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 5_000_000_000
    reader = dcp.FileSystemReader(src)
    meta = reader.read_metadata()
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype) for k, m in meta.state_dict_metadata.items()
          if hasattr(m, "size")}
    dcp.load_state_dict(sd, reader, no_dist=True)
    shards, current = [[]], 0
    for k in sorted(sd):
        n = sd[k].numel() * sd[k].element_size()
        if shards[-1] and current + n > limit:
            shards.append([])
            current = 0
        shards[-1].append(k)
        current += n
    os.makedirs(dst, exist_ok=True)
    weight_map = {}
    for i, names in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        save(os.path.join(dst, name), {k: sd[k] for k in names}, names, {"format": "pt"})
        weight_map.update({k: name for k in names})
    if len(shards) > 1:
        total = sum(sd[k].numel() * sd[k].element_size() for k in sd)
        with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
