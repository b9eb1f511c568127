"""Debian's torch 1.13 DCP (torch.distributed._shard.checkpoint) for the test and benchmark scripts.

Importing this module first lets 1.13's DCP import under Python 3.11: 3.11 refuses a dataclass
field whose default is an unhashable instance, and TensorProperties (an eq-dataclass, so
unhashable) is such a default. Here, in this process only, eq-dataclasses get object's identity
hash. alias_torch2_modules() then lets 1.13's reader load what torch >= 2.3 (and Stoker) write.
"""
import dataclasses
import sys
import types

_orig_process_class = dataclasses._process_class


def _process_class(cls, *args, **kwargs):
    out = _orig_process_class(cls, *args, **kwargs)
    if out.__dict__.get("__hash__", 0) is None:
        out.__hash__ = object.__hash__
    return out


dataclasses._process_class = _process_class

import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard.checkpoint import filesystem as fs13  # noqa: E402
from torch.distributed._shard.checkpoint import metadata as md13  # noqa: E402
from torch.distributed._shard.sharded_tensor import metadata as stmd  # noqa: E402


def alias_torch2_modules():
    """Points torch >= 2.3's module paths (torch.distributed.checkpoint.metadata / .filesystem, with
    TensorProperties and _MEM_FORMAT_ENCODING beside Metadata) at torch 1.13's classes."""
    md2 = types.ModuleType("torch.distributed.checkpoint.metadata")
    for name in ["Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex"]:
        setattr(md2, name, getattr(md13, name))
    md2.TensorProperties = stmd.TensorProperties
    md2._MEM_FORMAT_ENCODING = stmd.MEM_FORMAT_ENCODING
    sys.modules.setdefault("torch.distributed.checkpoint", types.ModuleType("torch.distributed.checkpoint"))
    sys.modules["torch.distributed.checkpoint.metadata"] = md2
    sys.modules["torch.distributed.checkpoint.filesystem"] = fs13
