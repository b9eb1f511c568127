"""A hostile .pt: its storage claims 2^62 + 1 float32 elements (2^64 + 4 bytes, which wraps to 4 in
64-bit arithmetic) and its record holds 4 bytes. Readers must refuse it, not read past the record.
usage: pt_overflow_fixture.py OUT.pt"""
import collections, io, pickle, sys, zipfile

import torch


class Storage:
    pass


class Tensor:
    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (Storage(), 0, (1024,), (1,), False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", torch.FloatStorage, "0", "cpu", 2**62 + 1) if isinstance(obj, Storage) else None


buf = io.BytesIO()
Pickler(buf, protocol=2).dump({"w": Tensor()})
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("archive/data.pkl", buf.getvalue())
    z.writestr("archive/data/0", b"\0" * 4)
