"""Cases the probe tests (tst_probe) run: `python3 probe_cases.py CASE ARGS...` with
PYTHONPATH pointing at the repository's python/ folder. Each prints what the C++ side checks."""

import collections
import json
import os
import sys
import time

import stoker_probe
from stoker_probe import _batch_bytes, _batch_samples


class Sleepy:
    """An iterable whose next() takes `wait_s` and yields `batches` batches of `batch` items."""

    def __init__(self, batches, wait_s, make):
        self.batches, self.wait_s, self.make = batches, wait_s, make

    def __len__(self):
        return self.batches

    def __iter__(self):
        for i in range(self.batches):
            time.sleep(self.wait_s)
            yield self.make(i)


def timing(publish, interval_ms):
    import torch
    data = Sleepy(40, 0.010, lambda i: (torch.zeros(8, 3, dtype=torch.float32), torch.zeros(8, dtype=torch.int64)))
    for epoch in range(2):
        for batch in stoker_probe.watch(data, publish=publish, name="sleepy", interval_ms=int(interval_ms)):
            time.sleep(0.020)  # the training step
    stoker_probe.shutdown()


def shapes():
    import numpy as np
    import torch

    class Custom:
        batch_size = 5

    class Sized:
        def __len__(self):
            return 6

    cases = {
        "tensor": torch.zeros(4, 2),
        "tuple": (torch.zeros(7, 2), torch.zeros(7)),
        "list": [torch.zeros(3, 1, 28, 28), torch.zeros(3)],
        "dict": {"input_ids": torch.zeros(9, 16, dtype=torch.int64), "labels": torch.zeros(9)},
        "nested": ({"x": torch.zeros(2, 2)}, [1, 2]),
        "numpy": np.zeros((11, 4), dtype=np.float32),
        "custom": Custom(),
        "sized": Sized(),
        "scalar": 3.5,
        "mapping": collections.UserDict({"input_ids": torch.zeros(9, 16, dtype=torch.int64)}),  # HF's BatchEncoding
    }
    print(json.dumps({k: {"samples": _batch_samples(v), "bytes": _batch_bytes(v)} for k, v in cases.items()}))


def flood(publish, count):
    """As fast as it goes, with a record every millisecond: the loop must not wait for anyone."""
    data = range(int(count))
    start = time.perf_counter()
    n = 0
    w = stoker_probe.watch(data, publish=publish, interval_ms=1)
    for _ in w:
        n += 1
    took = time.perf_counter() - start
    print(json.dumps({"items": n, "seconds": took, "records": w.records, "dropped": w.publisher.dropped}), flush=True)
    stoker_probe.shutdown(0.2)


def steady(publish, seconds):
    """Batches every 50 ms for `seconds`; prints the slowest loop iteration at the end."""
    import torch
    end = time.monotonic() + float(seconds)

    def forever():
        while time.monotonic() < end:
            yield torch.zeros(4, 4)

    worst, last = 0.0, time.perf_counter()
    for _ in stoker_probe.watch(forever(), publish=publish, interval_ms=50):
        time.sleep(0.05)
        now = time.perf_counter()
        worst, last = max(worst, now - last), now
    print(json.dumps({"worst_iteration_s": worst}), flush=True)
    stoker_probe.shutdown(0.2)


def listen(seconds):
    """Publishes on listen:0 and says the port; a monitor dials in."""
    import torch
    p = stoker_probe.publisher_for("listen:127.0.0.1:0")
    print(json.dumps({"port": p.port}), flush=True)
    end = time.monotonic() + float(seconds)

    def forever():
        while time.monotonic() < end:
            yield torch.zeros(2, 2)

    for _ in stoker_probe.watch(forever(), publish="listen:127.0.0.1:0", interval_ms=50):
        time.sleep(0.01)
    stoker_probe.shutdown(0.2)


def robust(path):
    """Telemetry never breaks the script: a length that raises, a loader pickled after zero-code
    mode watched it, a watched iterable iterated again in a forked child (whose records are its
    own, not queued for ever on the parent's publisher)."""
    import copy
    import pickle

    import torch
    from stoker_probe import _patch

    publish = "file:" + path

    class NoLength:
        def __iter__(self):
            return iter([torch.zeros(2)] * 5)

        def __len__(self):
            raise NotImplementedError

    items = sum(1 for _ in stoker_probe.watch(NoLength(), publish=publish, interval_ms=1))
    _patch.install(publish, 1)
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    assert len(list(loader)) == 4
    pickle.loads(pickle.dumps(loader))
    copy.deepcopy(loader)
    watched = stoker_probe.watch([torch.zeros(3)] * 4, publish=publish, name="forked", interval_ms=1)
    list(watched)
    assert isinstance(copy.copy(watched), stoker_probe.Watched)  # watch()'s result copies as before
    child = os.fork()
    if child == 0:
        list(watched)
        stoker_probe.shutdown()
        os._exit(0)
    os.waitpid(child, 0)
    stoker_probe.shutdown()
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    print(json.dumps({"items": items, "child_records": sum(1 for r in records if r["pid"] == child),
                      "parent_records": sum(1 for r in records if r["pid"] == os.getpid())}))


if __name__ == "__main__":
    case, args = sys.argv[1], sys.argv[2:]
    globals()[case](*args)
