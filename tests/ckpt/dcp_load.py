"""Loads a DCP checkpoint written by Stoker (`--to dcp[:M]`, torch 2.x's layout) with Debian's
torch 1.13 DCP reader, as a user's dcp.load would, and compares every tensor with a reference
torch.save'd state dict. Prints one JSON line; exit 1 on any difference.

usage: dcp_load.py DCP_DIR REFERENCE.pt

torch 1.13 keeps DCP's classes under torch.distributed._shard.checkpoint; this process points the
torch >= 2.3 module paths Stoker writes (torch.distributed.checkpoint.metadata / .filesystem,
TensorProperties and _MEM_FORMAT_ENCODING beside Metadata) at them (dcp_compat).
"""
import json, os, pickletools, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compat import alias_torch2_modules, dcp, torch  # noqa: E402

alias_torch2_modules()
src, ref_path = sys.argv[1], sys.argv[2]
raw = open(src + "/.metadata", "rb").read()
globals_used = sorted({arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"})
pickletools.dis(raw, out=open("/dev/null", "w"))  # a well-formed pickle, opcode by opcode

reader = dcp.FileSystemReader(src)
meta = reader.read_metadata()
sd = {}
for fqn, m in meta.state_dict_metadata.items():  # non-tensor items are loaded into None's place
    sd[fqn] = torch.empty(tuple(m.size), dtype=m.properties.dtype) if hasattr(m, "size") else None
dcp.load_state_dict(sd, reader, no_dist=True)
items = {k: v for k, v in sd.items() if not isinstance(v, torch.Tensor)}
sd = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
ref = torch.load(ref_path)
diff = sorted(k for k in ref if k not in sd or sd[k].dtype != ref[k].dtype or not torch.equal(sd[k], ref[k]))
extra = sorted(k for k in sd if k not in ref)
chunks = {k: len(m.chunks) for k, m in meta.state_dict_metadata.items() if hasattr(m, "chunks")}
print(json.dumps({"tensors": len(sd), "different": diff, "extra": extra, "chunks": chunks, "globals": globals_used,
                  "items": {k: repr(v) for k, v in items.items()},
                  "planner_data": {k: list(v) for k, v in (meta.planner_data or {}).items()}}))
sys.exit(1 if diff or extra else 0)
