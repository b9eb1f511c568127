"""stoker.Loader's two per-batch paths -- the extension stoker._batches (the core's tensors wrapped
as they are) and ctypes + DLPack (the fallback where the extension was not built) -- hand over the
same batches: values, dtypes, shapes, strides, indices and consumed counts, as tuples and as dicts;
a batch held under reuse_buffers stays intact on both. (Ctrl-C on both: bad_use.py.)"""

import os

import torch

import stoker
from stoker import loader as loader_module
from common import result

built = os.environ.get("STOKER_EXPECT_BATCHES_MODULE") == "1"
assert (stoker._native.batches is not None) == built, \
    f"stoker._batches: built={built} but loaded={stoker._native.batches is not None}"
fast = loader_module._batches_next


def run(dataset, extension, epoch=3, **kw):
    """One epoch's batches, each batch's indices, the state after it and the iterator's class."""
    loader_module._batches_next = fast if extension else None
    try:
        loader = stoker.Loader(dataset, **kw)
        loader.set_epoch(epoch)
        it = iter(loader)
        batches, indices = [], []
        for b in it:
            batches.append(b)
            indices.append(it.indices.clone())
        state = loader.state_dict()
        loader.close()
        return batches, indices, state, type(it).__name__
    finally:
        loader_module._batches_next = fast


def same(a, b, where):
    assert type(a) is type(b), f"{where}: {type(a)} against {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        a, b = list(a.values()), list(b.values())
    assert len(a) == len(b), where
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), \
            f"{where}: {x.dtype} {tuple(x.shape)} {x.stride()} against {y.dtype} {tuple(y.shape)} {y.stride()}"
        assert torch.equal(x, y), f"{where}: values differ"


compared = 0
x = torch.arange(1000 * 6, dtype=torch.float32).reshape(1000, 2, 3)
cases = [
    # One-channel images: the size-1 dimension keeps its stride on both paths.
    ("fashion-mnist", dict(batch_size=100, shuffle=True, num_workers=2)),
    ("fashion-mnist", dict(batch_size=100, shuffle=True, num_workers=2, reuse_buffers=True)),
    # Three fields from tensors the script holds, as a dict, with a short last batch.
    ({"x": x, "y": torch.arange(1000), "w": torch.rand(1000, dtype=torch.float64)},
     dict(batch_size=64, shuffle=True, as_dict=True, num_workers=1)),
    # A dataset's bool field: torch 1.13's DLPack has none, and the ctypes path failed half-way
    # (leaking the fields it had exported).
    ("synthetic:40,4,bool", dict(batch_size=8, num_workers=1)),
]
for dataset, kw in cases:
    ext = run(dataset, True, **kw) if built else None
    ref = run(dataset, False, **kw)
    assert ref[3] == "_EpochIterator", ref[3]
    if not built:
        continue
    assert ext[3] == "_BatchesEpochIterator", ext[3]
    assert len(ext[0]) == len(ref[0]) and len(ext[0]) > 0
    for i, (a, b) in enumerate(zip(ext[0], ref[0])):
        same(a, b, f"{kw} batch {i}")
        assert torch.equal(ext[1][i], ref[1][i]), f"{kw} batch {i}: indices differ"
        compared += 1
    assert ext[2] == ref[2], f"states differ: {ext[2]} against {ref[2]}"

# A batch kept past the next ones under reuse_buffers stays intact, on each path.
for extension in ([True, False] if built else [False]):
    loader_module._batches_next = fast if extension else None
    keep = stoker.Loader("fashion-mnist", batch_size=256, num_workers=2, reuse_buffers=True)
    it = iter(keep)
    first_x, first_y = next(it)
    snapshot = first_x.clone(), first_y.clone()
    for _ in range(30):
        next(it)
    assert torch.equal(first_x, snapshot[0]) and torch.equal(first_y, snapshot[1]), \
        f"a batch Python still held was overwritten (extension={extension})"
    keep.close()
loader_module._batches_next = fast

# Two threads taking batches from one iterator: every sample once, on each path. The ctypes path
# shared one array of field pointers, and the threads wrapped each other's batches (each deleter
# ran twice: "malloc(): unsorted double linked list corrupted").
import threading  # noqa: E402
for extension in ([True, False] if built else [False]):
    loader_module._batches_next = fast if extension else None
    shared = stoker.Loader((torch.arange(40000),), batch_size=2, num_workers=2)
    it = iter(shared)
    seen = [[], []]

    def take(k):
        for (b,) in it:
            seen[k].append(b)
    threads = [threading.Thread(target=take, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = torch.cat(seen[0] + seen[1]).sort().values
    assert torch.equal(got, torch.arange(40000)), f"extension={extension}: samples lost or repeated"
    assert seen[0] and seen[1], "one thread took every batch"
    shared.close()
loader_module._batches_next = fast

result(batches_compared=compared, extension=built)
