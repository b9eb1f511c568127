"""IDX files (MNIST, Fashion-MNIST), gzip or plain, as numpy arrays: what the Python peers of the
benchmarks read Debian's dataset-fashion-mnist with."""
import gzip

import numpy as np


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
