"""Loads a DCP checkpoint written by Stoker (`--to dcp[:M]`, torch 2.x's layout) with Debian's
torch 1.13 DCP reader, as a user's dcp.load would, and compares every tensor with a reference
torch.save'd state dict. Prints one JSON line; exit 1 on any difference.

usage: dcp_load.py DCP_DIR REFERENCE.pt

torch 1.13 keeps DCP's classes under torch.distributed._shard.checkpoint; this process points the
torch >= 2.3 module paths Stoker writes (torch.distributed.checkpoint.metadata / .filesystem,
TensorProperties and _MEM_FORMAT_ENCODING beside Metadata) at them, and lets 1.13's DCP import
under Python 3.11 (dcp_fixtures.py explains the dataclass patch).
"""
import dataclasses, json, pickletools, sys, types

_orig_process_class = dataclasses._process_class
def _process_class(cls, *args, **kwargs):
    out = _orig_process_class(cls, *args, **kwargs)
    if out.__dict__.get("__hash__", 0) is None:
        out.__hash__ = object.__hash__
    return out
dataclasses._process_class = _process_class

import torch
import torch.distributed._shard.checkpoint as dcp
from torch.distributed._shard.checkpoint import metadata as md13, filesystem as fs13
from torch.distributed._shard.sharded_tensor import metadata as stmd

md2 = types.ModuleType("torch.distributed.checkpoint.metadata")
for name in ["Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex"]:
    setattr(md2, name, getattr(md13, name))
md2.TensorProperties = stmd.TensorProperties
md2._MEM_FORMAT_ENCODING = stmd.MEM_FORMAT_ENCODING
sys.modules.setdefault("torch.distributed.checkpoint", types.ModuleType("torch.distributed.checkpoint"))
sys.modules["torch.distributed.checkpoint.metadata"] = md2
sys.modules["torch.distributed.checkpoint.filesystem"] = fs13

src, ref_path = sys.argv[1], sys.argv[2]
raw = open(src + "/.metadata", "rb").read()
globals_used = sorted({arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"})
pickletools.dis(raw, out=open("/dev/null", "w"))  # a well-formed pickle, opcode by opcode

reader = dcp.FileSystemReader(src)
meta = reader.read_metadata()
sd = {}
for fqn, m in meta.state_dict_metadata.items():
    sd[fqn] = torch.empty(tuple(m.size), dtype=m.properties.dtype)
dcp.load_state_dict(sd, reader, no_dist=True)
ref = torch.load(ref_path)
diff = sorted(k for k in ref if k not in sd or sd[k].dtype != ref[k].dtype or not torch.equal(sd[k], ref[k]))
extra = sorted(k for k in sd if k not in ref)
chunks = {k: len(m.chunks) for k, m in meta.state_dict_metadata.items()}
print(json.dumps({"tensors": len(sd), "different": diff, "extra": extra, "chunks": chunks, "globals": globals_used,
                  "planner_data": {k: list(v) for k, v in (meta.planner_data or {}).items()}}))
sys.exit(1 if diff or extra else 0)
