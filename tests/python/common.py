"""Helpers the Python package's test scripts share (run by tests/core/tst_python_package.cpp)."""

import gzip
import json
import os
import struct

import numpy as np
import torch

FASHION = os.environ.get("STOKER_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion(split="train"):
    """Fashion-MNIST as torchvision's FashionMNIST + ToTensor gives it: float32 [N,1,28,28] / 255."""
    prefix = "train" if split == "train" else "t10k"
    images = torch.from_numpy(read_idx(f"{FASHION}/{prefix}-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(f"{FASHION}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64))
    return images.unsqueeze(1).float().div(255), labels


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10))

    def forward(self, x):
        return self.body(x)


def result(**figures):
    """The script's findings, as the last line of stdout (the C++ suite reads it)."""
    print(json.dumps(figures), flush=True)


def read_safetensors(path):
    """{name: tensor} of a .safetensors file (the official layout; no safetensors module here)."""
    import json as _json
    dtypes = {"F32": torch.float32, "I64": torch.int64, "U8": torch.uint8, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = _json.loads(data[8:8 + n])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[spec["dtype"]]).reshape(spec["shape"]) if raw else \
            torch.empty(spec["shape"], dtype=dtypes[spec["dtype"]])
    return out
