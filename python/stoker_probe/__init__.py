"""stoker_probe: Stoker's telemetry from any Python training loop, with no change to it.

    for batch in stoker_probe.watch(loader, publish="HOST:PORT"):
        ...

yields the loader's items unchanged and publishes, every `interval_ms`, one JSON-lines record
of the same schema as Stoker's C++ core (DESIGN.md "Telemetry"): the data wait (time inside
next()), the step time (time between handing a batch over and the next next()), samples/s and
bytes/s from the batch's first tensor, device memory from torch.cuda when CUDA is in use, and
rank, local rank and world size from the torchrun environment. `python3 -m stoker_probe
--publish ADDR script.py ARGS...` watches every torch DataLoader a script iterates.

Standard library only; torch is used when it is importable. Publishing happens on a thread of
its own through a bounded queue: the training loop never waits for the network.
"""

import atexit
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Mapping

from ._publisher import Publisher

__all__ = ["watch", "Watched", "publisher_for", "shutdown"]

_publishers = {}
_publishers_lock = threading.Lock()
_HOST = socket.gethostname()
# Epochs counted per iterable, so that `for batch in watch(loader)` written inside the epoch loop
# (a new Watched every epoch) still counts them.
_epochs = weakref.WeakKeyDictionary()


def _unwatched():
    return None


def _forget_publishers():
    """In a fork's child: the parent's publishers have no thread here, and their lock may be held."""
    global _publishers_lock
    _publishers.clear()
    _publishers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_publishers)


def publisher_for(address):
    """The process's publisher for `address` (one per address, shared by every watched loader)."""
    with _publishers_lock:
        p = _publishers.get(address)
        if p is None:
            p = _publishers[address] = Publisher(address)
        return p


def shutdown(timeout=0.5):
    """Sends what is queued (up to `timeout` seconds per address) and stops the publishers."""
    with _publishers_lock:
        ps = list(_publishers.values())
        _publishers.clear()
    for p in ps:
        p.close(timeout)


# Records still queued when the script ends are sent (up to half a second per address).
atexit.register(shutdown)


def _env_int(name):
    value = os.environ.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _torch():
    return sys.modules.get("torch")  # only when the script uses torch: the probe never imports it


def _first_tensor(batch, depth=0):
    """The first tensor-like item of a batch (tuple, list, dict, or an object with tensors)."""
    if depth > 4:
        return None
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        return batch
    if isinstance(batch, Mapping):  # a dict, or HF's BatchEncoding (a UserDict)
        for v in batch.values():
            t = _first_tensor(v, depth + 1)
            if t is not None:
                return t
        return None
    if isinstance(batch, (tuple, list)):
        for v in batch:
            t = _first_tensor(v, depth + 1)
            if t is not None:
                return t
    return None


def _batch_bytes(batch, depth=0):
    """Bytes of the tensors in a batch, or None when it holds none."""
    if depth > 4:
        return None
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        nbytes = getattr(batch, "nbytes", None)
        if nbytes is None and hasattr(batch, "element_size"):
            nbytes = batch.element_size() * batch.numel()
        return int(nbytes) if nbytes is not None else None
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    total = None
    for v in items:
        b = _batch_bytes(v, depth + 1)
        if b is not None:
            total = (total or 0) + b
    return total


def _batch_samples(batch):
    """Samples in a batch: a size hint (`batch_size`, `__len__` of a custom batch), else dim 0 of
    its first tensor; 1 when nothing says (a sample, not a batch)."""
    hint = getattr(batch, "batch_size", None)
    if isinstance(hint, int):
        return hint
    t = _first_tensor(batch)
    if t is not None:
        shape = t.shape
        return int(shape[0]) if len(shape) > 0 else 1
    if not isinstance(batch, (tuple, list, Mapping, str, bytes)) and hasattr(batch, "__len__"):
        try:
            return len(batch)
        except TypeError:
            pass
    return 1


class _Window:
    """Figures since the last record."""

    __slots__ = ("start", "batches", "samples", "bytes", "bytes_known", "wait", "step", "steps")

    def __init__(self, start):
        self.start = start
        self.batches = 0
        self.samples = 0
        self.bytes = 0
        self.bytes_known = True
        self.wait = 0.0
        self.step = 0.0
        self.steps = 0


class Watched:
    """Wraps an iterable: iterating it iterates the iterable and measures the consumer."""

    def __init__(self, iterable, publish=None, name=None, interval_ms=500, publisher=None):
        if publish is None and publisher is None:
            publish = os.environ.get("STOKER_PROBE_PUBLISH")
            if not publish:
                raise ValueError("stoker_probe.watch: give publish='HOST:PORT', 'file:PATH' or 'listen:PORT'")
        if interval_ms <= 0:
            raise ValueError("stoker_probe.watch: interval_ms must be positive")
        self.iterable = iterable
        self.publisher = publisher or publisher_for(publish)
        self.name = name
        self.interval = interval_ms / 1000.0
        self.epoch = 0
        self.rank = _env_int("RANK")
        if self.rank is None:  # mp.spawn sets no RANK: the process group's, as DistributedSampler's
            torch = _torch()
            dist = getattr(torch, "distributed", None) if torch is not None else None
            self.rank = dist.get_rank() if dist is not None and dist.is_available() and dist.is_initialized() else 0
        self.publish_errors = 0
        self.attached = False  # kept in its loader by zero-code mode (_patch)
        self.local_rank = _env_int("LOCAL_RANK")
        self.world_size = _env_int("WORLD_SIZE")
        self.pid = os.getpid()
        self.records = 0

    def __len__(self):
        return len(self.iterable)

    def __iter__(self):
        return _WatchedIterator(self, iter(self.iterable))

    def __reduce_ex__(self, protocol):
        # Zero-code mode keeps a loader's Watched in the loader: a pickled or copied loader (its
        # publisher holds a lock and a thread, which do not pickle) is watched afresh where it is
        # iterated. Before, pickle.dumps(loader) and deepcopy failed once it had been iterated.
        # A Watched the script made (watch()) copies as any object does.
        if self.attached:
            return (_unwatched, ())
        return super().__reduce_ex__(protocol)

    def _next_epoch(self):
        """Called when an iteration yields its first batch (a peek with next(iter(loader)) that
        is never continued still counts, an iterator that yields nothing does not)."""
        # DistributedSampler.set_epoch(e) is the script's own count: use it when it was called.
        sampler = getattr(self.iterable, "sampler", None)
        sampler_epoch = getattr(sampler, "epoch", None)
        try:
            counted = _epochs.get(self.iterable, -1) + 1
            _epochs[self.iterable] = counted
        except TypeError:  # not weak-referenceable: count per Watched
            counted = self._counted = getattr(self, "_counted", -1) + 1
        if isinstance(sampler_epoch, int) and (sampler_epoch > 0 or counted == 0):
            self.epoch = sampler_epoch
        else:  # no sampler epoch, or set_epoch never called (it stays 0): count
            self.epoch = counted
        return self.epoch

    def __getattr__(self, attr):  # the wrapped loader's attributes (sampler, dataset, batch_size...)
        if attr == "iterable":  # not set yet (a half-built object): no recursion
            raise AttributeError(attr)
        return getattr(self.iterable, attr)

    def _prefetch_depth(self):
        workers = getattr(self.iterable, "num_workers", None)
        if workers is None:
            return None
        factor = getattr(self.iterable, "prefetch_factor", None) or 2
        return int(workers) * int(factor) if workers > 0 else 0

    def _steps_total(self):
        # An IterableDataset's length is only a hint, and asking a DataLoader for it makes PyTorch
        # warn on every batch once more come than it said: left unknown (0).
        torch = _torch()
        dataset = getattr(self.iterable, "dataset", None)
        if torch is not None and dataset is not None and isinstance(dataset, torch.utils.data.IterableDataset):
            return 0
        try:
            return len(self.iterable)
        except Exception:  # no length, or one that raises (NotImplementedError): unknown
            return 0

    def _device_and_memory(self, batch_device):
        torch = _torch()
        record = {}
        device = "cpu"
        cuda = torch is not None and hasattr(torch, "cuda") and torch.cuda.is_available() and torch.cuda.is_initialized()
        if getattr(batch_device, "type", None) == "cuda":
            index = batch_device.index if batch_device.index is not None else torch.cuda.current_device()
            device = f"cuda:{index}"
        elif cuda:
            # CPU batches (a DataLoader's): the rank's GPU is torchrun's LOCAL_RANK where it names
            # one, as DDP scripts that move batches with .to(local_rank) use it without set_device;
            # current_device() is GPU 0 there, for every rank.
            index = torch.cuda.current_device()
            if self.local_rank is not None and 0 <= self.local_rank < torch.cuda.device_count():
                index = self.local_rank
            device = f"cuda:{index}"
        if device.startswith("cuda:") and cuda:
            index = int(device[5:])
            record["mem_allocated"] = int(torch.cuda.memory_allocated(index))
            record["mem_reserved"] = int(torch.cuda.memory_reserved(index))
            # mem_get_info makes a CUDA context on a GPU this process has not used (300-500 MB
            # there, in every rank): asked only where the allocator already holds memory.
            if record["mem_reserved"] > 0:
                try:
                    free, total = torch.cuda.mem_get_info(index)
                    record["mem_total"] = int(total)
                    record["mem_used"] = int(total - free)
                except (RuntimeError, AttributeError):
                    pass
        return device, record

    def _publish(self, window, now, step, batch_device, epoch_end, epoch):
        # Telemetry never stops training: an error here (a length that raises, a device query)
        # is counted, not raised from the script's `for`.
        try:
            self._publish_record(window, now, step, batch_device, epoch_end, epoch)
        except Exception:
            self.publish_errors += 1

    def _publish_record(self, window, now, step, batch_device, epoch_end, epoch):
        if self.pid != os.getpid():
            # A forked child: the parent's publisher has no thread here (its records were queued
            # for ever, with the parent's pid), and its lock may have been held at the fork.
            self.pid = os.getpid()
            self.publisher = publisher_for(self.publisher.address)
        span = max(now - window.start, 1e-9)
        batches = max(window.batches, 1)
        device, memory = self._device_and_memory(batch_device)
        record = {
            "time": time.time(),
            "host": _HOST,
            "pid": self.pid,
            "rank": self.rank,
            "device": device,
            "epoch": epoch,
            "step": step,
            "steps_total": self._steps_total(),
            "samples_per_s": window.samples / span,
            "data_wait_ms": 1e3 * window.wait / batches,
            "step_ms": 1e3 * window.step / max(window.steps, 1),
            "mode": "python",
            "source": "python",
            "epoch_end": epoch_end,
            "dropped": self.publisher.dropped,
        }
        if window.bytes_known and window.batches:
            record["bytes_per_s"] = window.bytes / span
        depth = self._prefetch_depth()
        if depth is not None:
            record["prefetch_depth"] = depth
        if self.local_rank is not None:
            record["local_rank"] = self.local_rank
        if self.world_size is not None:
            record["world_size"] = self.world_size
        if self.name:
            record["loader"] = self.name
        record.update(memory)
        self.publisher.publish(record)
        self.records += 1


class _WatchedIterator:
    """next() is the data wait; the time from handing a batch over to the next next() is the
    consumer's step. The cost per batch is two clock reads and a few additions; a record is
    built at most once per interval."""

    def __init__(self, watched, it):
        self.watched = watched
        self.it = it
        self.step = 0
        self.handed = None  # when the last batch was handed over
        self.last_device = None  # of the last batch (the batch itself is not kept: its memory is the script's)
        now = time.perf_counter()
        self.window = _Window(now)
        self.epoch_total = _Window(now)  # the epoch-end record summarises the whole epoch
        self.finished = False
        self.epoch = None  # known at the first batch

    def __iter__(self):
        return self

    def __len__(self):
        return len(self.it)

    def __getattr__(self, attr):  # the DataLoader iterator's own attributes
        if attr == "it":
            raise AttributeError(attr)
        return getattr(self.it, attr)

    def __next__(self):
        start = time.perf_counter()
        w, total = self.window, self.epoch_total
        if self.handed is not None:
            step = start - self.handed
            w.step += step
            w.steps += 1
            total.step += step
            total.steps += 1
        try:
            batch = next(self.it)
        except StopIteration:
            if not self.finished:
                self.finished = True
                epoch = self.epoch if self.epoch is not None else self.watched.epoch
                self.watched._publish(total, time.perf_counter(), self.step, self.last_device, True, epoch)
            raise
        end = time.perf_counter()
        if self.epoch is None:
            self.epoch = self.watched._next_epoch()
        wait = end - start
        samples = _batch_samples(batch)
        b = _batch_bytes(batch)
        for acc in (w, total):
            acc.wait += wait
            acc.batches += 1
            acc.samples += samples
            if b is None:
                acc.bytes_known = False
            else:
                acc.bytes += b
        self.step += 1
        self.last_device = getattr(_first_tensor(batch), "device", None)
        if end - w.start >= self.watched.interval:
            self.watched._publish(w, end, self.step, self.last_device, False, self.epoch)
            self.window = _Window(end)
        self.handed = time.perf_counter()
        return batch


def watch(iterable, publish=None, name=None, interval_ms=500):
    """Yields `iterable`'s items unchanged and publishes its telemetry to `publish`
    ("HOST:PORT" of `stoker monitor` or the workbench's Monitor, "file:PATH", or "listen:PORT"
    for monitors that dial in). Defaults to $STOKER_PROBE_PUBLISH."""
    return Watched(iterable, publish=publish, name=name, interval_ms=interval_ms)
