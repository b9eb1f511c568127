"""A torch.save file as torch >= 2.3 writes it, built here because Debian's torch 1.13 cannot:
storages of the dtypes 1.13 lacks (UInt16Storage, UInt32Storage, Float8_e4m3fnStorage),
_rebuild_tensor_v2 with its 7th (metadata) argument, _rebuild_parameter_with_state, records
64-byte aligned (torch >= 2.1) and the .data/serialization_id record. Also writes the same
tensors, bytes for bytes, as a safetensors file to compare with.

usage: pt_torch2_fixture.py OUT.pt EXPECTED.safetensors
"""
import collections, json, pickle, struct, sys, zipfile

import torch  # only for torch._utils's functions, which pickle names by module and name

out, expected = sys.argv[1], sys.argv[2]


class Storage:  # a persistent id ('storage', <class>, key, 'cpu', numel)
    def __init__(self, cls, key, numel):
        self.cls, self.key, self.numel = cls, key, numel


def storage_class(name):
    cls = type(name, (), {})
    cls.__module__ = "torch"
    setattr(torch, name, cls)  # pickle checks that torch.<name> is the class it names
    return cls


class Tensor:
    def __init__(self, storage, size, stride, offset=0):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict(), None)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


if not hasattr(torch._utils, "_rebuild_parameter_with_state"):  # torch >= 2.0 only
    def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
        raise NotImplementedError
    _rebuild_parameter_with_state.__module__ = "torch._utils"
    torch._utils._rebuild_parameter_with_state = _rebuild_parameter_with_state


class Parameter:
    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce__(self):
        return (torch._utils._rebuild_parameter_with_state, (self.tensor, True, collections.OrderedDict(), None))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


# name: (storage class, safetensors dtype, element size, shape, raw bytes)
U16, U32 = storage_class("UInt16Storage"), storage_class("UInt32Storage")
F8 = storage_class("Float8_e4m3fnStorage")
specs = {
    "u16": (U16, "U16", 2, [3], struct.pack("<3H", 1, 40000, 65535)),
    "u32": (U32, "U32", 4, [2, 2], struct.pack("<4I", 0, 1, 3_000_000_000, 4294967295)),
    "f8": (F8, "F8_E4M3", 1, [4], bytes([0x38, 0x40, 0xB8, 0x7E])),
    "weight": (torch.FloatStorage, "F32", 4, [5, 3], struct.pack("<15f", *[i * 0.5 for i in range(15)])),
}
state = collections.OrderedDict()
records = {}
for i, (name, (cls, _, size, shape, raw)) in enumerate(specs.items()):
    key = str(i)
    stride = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        stride[d] = stride[d + 1] * shape[d + 1]
    t = Tensor(Storage(cls, key, len(raw) // size), shape, stride)
    state[name] = Parameter(t) if name == "weight" else t
    records["data/" + key] = raw

import io
buf = io.BytesIO()
Pickler(buf, protocol=2).dump(state)
records = {"data.pkl": buf.getvalue(), "byteorder": b"little", **records, "version": b"3\n",
           ".data/serialization_id": b"0123456789012345678901234567890123456789"}

with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
    for name, data in records.items():
        info = zipfile.ZipInfo("archive/" + name)
        # Pad the local header's extra field so the data starts on a 64-byte boundary, as
        # torch >= 2.1's writer does.
        header = 30 + len(info.filename.encode())
        pad = (64 - (z.fp.tell() + header + 4) % 64) % 64
        info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        z.writestr(info, data)

header = {}
offset = 0
for name, (_, dtype, _, shape, raw) in sorted(specs.items()):
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
    offset += len(raw)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(expected, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(specs[k][4] for k in sorted(specs)))
