"""A hostile .pt: its storage claims 2^62 + 1 float32 elements (2^64 + 4 bytes, which wraps to 4 in
64-bit arithmetic) and its record holds 4 bytes. Readers must refuse it, not read past the record.
With "stride0": a storage of one float viewed as 2^59 + 1 elements of stride 0 (in bounds, but its
dense bytes, 2^61 + 4, wrapped to 4 in bits and sized the buffer that a strided load then overran).
With "names": no tensor, but a 1 MiB key shared (memoised) by 300 entries: 300 MiB of names from a
small file.
usage: pt_overflow_fixture.py OUT.pt [stride0|names]"""
import collections, io, pickle, sys, zipfile

import torch


class Storage:
    pass


STRIDE0 = sys.argv[2:] == ["stride0"]
NAMES = sys.argv[2:] == ["names"]
SIZE, STRIDE, NUMEL = ((2**59 + 1,), (0,), 1) if STRIDE0 else ((1024,), (1,), 2**62 + 1)


class Tensor:
    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (Storage(), 0, SIZE, STRIDE, False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", torch.FloatStorage, "0", "cpu", NUMEL) if isinstance(obj, Storage) else None


buf = io.BytesIO()
shared = {"k" * (1 << 20): None}
Pickler(buf, protocol=2).dump({"a": [shared] * 300} if NAMES else {"w": Tensor()})
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("archive/data.pkl", buf.getvalue())
    z.writestr("archive/data/0", b"\0" * 4)
