#!/usr/bin/python3
"""The loader benchmark's Python peers (tests/bench/loader_bench.sh runs this
next to the C++ side). Same data as `stoker bench --dataset fashion-mnist`:
Fashion-MNIST from Debian's dataset-fashion-mnist, float32 [N,1,28,28] in
[0,1] plus int64 labels, batch 256, shuffled, drop_last. Measures:
  - torch.utils.data.DataLoader over a TensorDataset, num_workers 0 and 2;
  - the hand-written loop: randperm + index_select per batch.
Prints one JSON document; each figure is the median of ROUNDS epochs after a
warm-up epoch."""
import json, os, statistics, sys, time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_file import read_idx as idx  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
DIR = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def find(stem):
    for suffix in (".gz", ""):
        p = os.path.join(DIR, stem + suffix)
        if os.path.exists(p):
            return p
    sys.exit(f"no {stem} in {DIR} (install dataset-fashion-mnist)")


images = torch.from_numpy(idx(find("train-images-idx3-ubyte")).astype(np.float32) / 255.0).unsqueeze(1).contiguous()
labels = torch.from_numpy(idx(find("train-labels-idx1-ubyte")).astype(np.int64))
N = images.shape[0]


def rate(epoch_fn):
    rates = []
    for r in range(ROUNDS + 1):
        start = time.perf_counter()
        samples = epoch_fn(r)
        seconds = time.perf_counter() - start
        if r > 0:
            rates.append(samples / seconds)
    return statistics.median(rates)


def dataloader(workers):
    loader = DataLoader(TensorDataset(images, labels), batch_size=256, shuffle=True, drop_last=True,
                        num_workers=workers, persistent_workers=workers > 0)

    def epoch(_):
        samples = 0
        for x, y in loader:
            samples += x.shape[0]
        return samples
    return rate(epoch)


def index_select_loop(_):
    perm = torch.randperm(N)
    samples = 0
    for b in range(0, N - 255, 256):
        i = perm[b:b + 256]
        x = images.index_select(0, i)
        y = labels.index_select(0, i)
        samples += x.shape[0]
    return samples


torch.set_num_threads(os.cpu_count())
out = {
    "torch_version": torch.__version__,
    "dataloader_workers_0_samples_per_s": dataloader(0),
    "dataloader_workers_2_samples_per_s": dataloader(2),
    "index_select_loop_samples_per_s": rate(index_select_loop),
}
out["dataloader_best_samples_per_s"] = max(out["dataloader_workers_0_samples_per_s"], out["dataloader_workers_2_samples_per_s"])
print(json.dumps(out, indent=2))
