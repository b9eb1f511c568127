"""stoker.Loader: the core's loader in a training script, in place of torch.utils.data.DataLoader."""

import atexit
import ctypes
import json
import os
import sys
import threading
import warnings
import weakref

import torch

from . import _native, _options, _scan_sharing
from ._native import lib

# The per-batch calls, bound once (see _EpochIterator.__next__).
_epoch_next = lib.stoker_epoch_next
_from_dlpack = _native._from_dlpack
_capsule_new = _native._capsule_new
_DLTENSOR = _native._DLTENSOR
_NOT_READY = _native.NOT_READY
_CLOSED = _native.CLOSED
_batches_next = _native.batches.next if _native.batches else None

_live = weakref.WeakSet()  # loaders with a core handle: closed at exit and dropped in a fork's child
_live_lock = threading.Lock()
_WAIT_MS = 100  # how long one wait may keep Python from seeing Ctrl-C
_MAX_FIELDS = 64


def _tensors_of(dataset):
    """(names, tensors) for tensors a script holds, else None."""
    if isinstance(dataset, torch.utils.data.TensorDataset):
        dataset = tuple(dataset.tensors)
    if isinstance(dataset, dict) and dataset and all(isinstance(v, torch.Tensor) for v in dataset.values()):
        return [str(k) for k in dataset], list(dataset.values())
    if isinstance(dataset, (tuple, list)) and dataset and all(isinstance(v, torch.Tensor) for v in dataset):
        return [f"tensor{i}" for i in range(len(dataset))], list(dataset)
    if isinstance(dataset, torch.Tensor):
        return ["tensor0"], [dataset]
    return None


def _outside_package():
    """The warnings stacklevel of the caller's first frame outside this package (the script's line)."""
    here = os.path.dirname(os.path.abspath(__file__))
    level, frame = 1, sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level


def _refuse_dataset(dataset):
    kinds = "\n  ".join(_native.take_json(lib.stoker_dataset_kinds()))
    raise TypeError(
        f"stoker.Loader reads datasets natively and cannot iterate a Python {type(dataset).__name__}: give a "
        f"dataset spec string or tensors (a tuple or dict of tensors sharing dim 0, or a TensorDataset). "
        f"Specs:\n  {kinds}")


class Loader:
    """The Stoker loader over a dataset spec or tensors, iterated like a DataLoader.

    Each ``for`` starts the next epoch (``set_epoch`` chooses it) and yields ``(images, labels)``,
    ``(input, target)`` -- the dataset's fields in order -- or ``{field: tensor}`` with
    ``as_dict=True``, as torch tensors on ``device`` that view the core's buffers (no copy). A batch
    stays valid while Python holds it: its buffer goes back to the pool when the last tensor viewing
    it is freed. On CUDA the batch is ready on the stream current when it is taken, and its buffer is
    reused only after the work queued on that stream by the time it is freed. ``record_stream`` does
    not reach Stoker's buffers (they are not PyTorch's caching allocator's): use a batch on the
    stream it was taken on, or before freeing it make that stream wait for the others
    (``taken_on.wait_stream(other)``).
    Tensors given as the dataset on a GPU stay there: the loader is resident on them, on their device.
    """

    def __init__(self, dataset, *, batch_size=None, shuffle=None, drop_last=None, num_workers=None,
                 prefetch_factor=None, prefetch=None, pin_memory=None, persistent_workers=None, timeout=None,
                 sampler=None, seed=None, transforms=None, device=None, options=None, publish=None, name=None,
                 rank=None, world_size=None, as_dict=None, rank_weights=None, rank_step_ms=None, share_scans=None,
                 **knobs):
        self._handle = None
        self._iterator = None
        self._cuda_fields = None  # the device of CUDA tensors given as the dataset
        # Batches as {field: tensor} when asked, or when the dataset was a dict of tensors.
        if as_dict is not None and (isinstance(as_dict, str) or as_dict not in (True, False)):
            raise TypeError(f"as_dict= takes True or False, not {as_dict!r}")  # bool("no") was True
        self.as_dict = bool(as_dict) if as_dict is not None else isinstance(dataset, dict)
        if rank_weights is not None and rank_step_ms is not None:
            raise ValueError("rank_weights and rank_step_ms: give one (a weighted split or El Che), not both")
        given = dict(batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers,
                     prefetch=prefetch, pin_memory=pin_memory, persistent_workers=persistent_workers,
                     timeout=timeout, seed=seed, transforms=transforms, **knobs)
        self.options = _options.build(options, rank=rank, world_size=world_size, sampler=sampler,
                                      prefetch_factor=prefetch_factor, **given)
        # The shard this loader serves (resume counts every rank's samples); a loader that is not
        # distributed is one rank of one, and reports torchrun's rank in telemetry.
        if self.options["sampler_type"] == "distributed" or self.options["shard_world_size"] > 1:
            self.rank, self.world_size = self.options["shard_rank"], self.options["shard_world_size"]
        else:
            self.rank, self.world_size = _options.distributed_env(rank, None)[0] or 0, 1
        # Unequal GPUs: the planner splits each step by per-rank weights (rank_weights) or gives each
        # rank whole batches in proportion to its speed (El Che, rank_step_ms); the core's batch
        # buffers are sized for this rank's largest share.
        self._split = None
        self._batch = self.options["batch_size"]
        if rank_weights is not None or rank_step_ms is not None:
            values = [float(v) for v in (rank_weights if rank_weights is not None else rank_step_ms)]
            name = "rank_weights" if rank_weights is not None else "rank_step_ms"
            if self.options["sampler_type"] != "distributed" or len(values) != self.world_size:
                raise ValueError(f"{name}: one value per rank of a distributed loader ({len(values)} given, "
                                 f"world size {self.world_size})")
            if not all(v > 0 and v == v and v != float("inf") for v in values):
                raise ValueError(f"{name}: must be positive numbers (got {values})")
            self._split = ("weights", values) if rank_weights is not None else ("step_ms", values)
            if rank_weights is not None:
                share = -(-self._batch * self.world_size * max(values) // sum(values))
                self.options["batch_size"] = int(min(self._batch * self.world_size, max(1, share)))
        held = _tensors_of(dataset)
        if held is not None and held[1][0].is_cuda:
            # CUDA tensors the script holds: the loader is resident on them where they are (no
            # copy), so its device is theirs unless the script names another (refused by the core).
            self._cuda_fields = held[1][0].device
            if device is None:
                device = str(self._cuda_fields)
        self.device = self._device_name("cpu" if device is None else device)
        if publish is None and os.environ.get("STOKER_PUBLISH"):
            publish = os.environ["STOKER_PUBLISH"].split(",")
        if isinstance(publish, str):
            publish = [publish]
        publish_json = _native.encode(json.dumps(list(publish))) if publish else None
        options_json = _native.encode(_native.dumps(self.options))
        self._split_len = None
        self._queued = None  # (epoch, order, sizes) the running epoch queued behind it (a split's plan)
        self._bool_fields = frozenset()  # held bool tensors: read as bytes, handed out as bool again
        if held is not None:
            names, tensors = held
            tensors = [t.detach().contiguous() for t in tensors]  # no copy unless strided
            # torch 1.13's DLPack has no bool (masks): the same bytes go as uint8.
            self._bool_fields = frozenset(i for i, t in enumerate(tensors) if t.dtype == torch.bool)
            tensors = [t.view(torch.uint8) if t.dtype == torch.bool else t for t in tensors]
            if self._cuda_fields is not None:
                # The loader gathers from them on streams of its own: what the script queued on
                # them (their making, the copy above) is done first.
                torch.cuda.current_stream(self._cuda_fields).synchronize()
            pointers = (ctypes.c_void_p * len(tensors))(*[_native.dlpack_from_tensor(t) for t in tensors])
            handle = lib.stoker_loader_from_dlpack(pointers, len(tensors), _native.encode(json.dumps(names)),
                                                   options_json, _native.encode(self.device), publish_json,
                                                   _native.encode(name), self.rank)
            self.spec = None
        elif isinstance(dataset, (str, bytes, os.PathLike)):
            self.spec = os.fsdecode(os.fspath(dataset))  # a bytes path too (it became "b'/data...'")
            exchange = _scan_sharing.Exchange() if _scan_sharing.wanted(self.spec, self.options, share_scans) else None
            handle = lib.stoker_loader_open(_native.encode_path(self.spec), options_json, _native.encode(self.device),
                                            publish_json, _native.encode(name), self.rank,
                                            exchange.callback if exchange else _native.EXCHANGE(), None)
            if not handle and exchange and exchange.error:
                raise exchange.error
        else:
            _refuse_dataset(dataset)
        if not handle:
            _native.raise_last_error()
        self._handle = handle
        with _live_lock:
            _live.add(self)
        named = _options.named_knobs(options)
        if self.spec is not None and num_workers is None and "num_workers" not in named:
            # Workers nobody chose: uncached remote token windows get enough to keep the network
            # busy (each batch waits a round trip; the workers are threads that wait). The ring
            # follows them as it would have: DataLoader's prefetch_factor a worker, two without
            # it, and a depth the script chose stays.
            per_worker = (0 if prefetch is not None or "prefetch" in named
                          else 2 if prefetch_factor is None else int(prefetch_factor))
            if lib.stoker_loader_raise_workers_for_network(handle, per_worker) < 0:
                _native.raise_last_error()
        info = self.describe()
        self.options.update({k: info["options"][k] for k in ("num_workers", "prefetch")})
        for text in info["advice"]:
            # As DataLoader warns of too many workers: once, at the script's line that made the
            # loader (through from_options or a subclass too).
            warnings.warn(text, _native.StokerWarning, stacklevel=_outside_package())
        self.fields = [f["name"] for f in info["fields"]]
        if _batches_next is None:
            # The ctypes path's DLPack has no bool (torch 1.13): bool fields come as their bytes.
            self._bool_fields |= frozenset(i for i, f in enumerate(info["fields"]) if f["dtype"] == "Bool")
        self._samples = info["samples"]
        self._batches = info["batches"]
        self._own_order = info["own_order"]  # the dataset orders its epochs itself (WebDataset)
        self._next_epoch = 0
        self._resume = None  # (epoch, global samples already consumed) from load_state_dict
        self._state = {"epoch": 0, "consumed": 0, "done": False}

    @classmethod
    def from_options(cls, path, dataset, **kwargs):
        """A loader with the options the workbench (or `stoker tune --save-options`) saved to `path`."""
        return cls(dataset, options=os.fspath(path), **kwargs)

    @staticmethod
    def _device_name(device):
        text = str(device)
        if text == "cuda" and torch.cuda.is_available():
            text = f"cuda:{torch.cuda.current_device()}"
        return text

    # --- what a DataLoader offers ---------------------------------------------------------------

    def __len__(self):
        if self._split is None:
            return self._batches
        if self._split_len is None:
            self._split_len = len(self._planned(0, 0)[1])
        return self._split_len

    def set_epoch(self, epoch):
        """The epoch the next ``for`` runs (its order is the sampler's for seed + epoch)."""
        if int(epoch) < 0:
            raise ValueError(f"epoch: must be non-negative (got {epoch})")
        self._next_epoch = int(epoch)

    def __iter__(self):
        self._close_iterator()
        epoch = self._next_epoch
        order, sizes, start, plan_next = None, None, 0, None
        if self._resume is not None and self._resume[0] == epoch:
            start = self._resume[1]
        queued, self._queued = self._queued, None
        if self._split is not None:
            if queued is not None and queued[0] == epoch and start == 0:
                order, sizes = queued[1], queued[2]  # what the last epoch queued: its batches are made
            else:
                order, sizes = self._planned(epoch, start)
            # A split's order is planned here, not drawn by the core: the next epoch's is planned on a
            # thread while this one runs and queued behind it, so its first batches are made before
            # this epoch ends, as the sampler's are (no gap at the boundary).
            plan_next = lambda e=epoch + 1: (e, *self._planned(e, 0))  # noqa: E731
        elif start:
            order = self._remaining_order(epoch, start)
        self._resume = None
        self._next_epoch = epoch + 1
        self._state = {"epoch": epoch, "consumed": start, "done": False}
        self._iterator = (_BatchesEpochIterator if _batches_next else _EpochIterator)(self, epoch, order, sizes, plan_next)
        return self._iterator

    def close(self):
        """Stops the workers and frees the loader's memory now (also done when it is collected)."""
        self._close_iterator()
        handle, self._handle = self._handle, None
        if handle:
            if self._cuda_fields is not None:
                # Gathers of batches made ahead still read the script's tensors on the loader's
                # streams: once the loader lets go of them, the caching allocator may hand their
                # memory to the script's stream.
                torch.cuda.synchronize(self._cuda_fields)
            lib.stoker_loader_free(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- beyond DataLoader ----------------------------------------------------------------------

    def describe(self):
        """Mode, prefetch depth, fields, notes, memory, the last epoch's summary and the options; once
        the process has read remote storage, `network`: the requests it sent, the bytes received and
        the requests retried."""
        return _native.take_json(lib.stoker_loader_describe(self._require()))

    def order(self, epoch):
        """The sample indices this rank gets in `epoch`, in the order it gets them."""
        n = lib.stoker_loader_order(self._require(), int(epoch), None, 0)
        if n < 0:
            _native.raise_last_error()
        out = torch.empty(n, dtype=torch.int64)
        # The handle checked again: closed by another thread in between, the fill fails (out unfilled).
        if lib.stoker_loader_order(self._require(), int(epoch), ctypes.cast(out.data_ptr(), ctypes.POINTER(ctypes.c_int64)), n) != n:
            _native.raise_last_error()
        return out

    @property
    def last_indices(self):
        """The sample indices of the batch the current iterator yielded last."""
        return self._iterator.indices if self._iterator is not None else None

    # --- resume (torchdata StatefulDataLoader's names) -----------------------------------------

    def state_dict(self):
        """Where the loader stands: the epoch and how many samples of its global order (all ranks,
        in lockstep as DDP keeps them) were consumed. Load it in a new process -- also with another
        world size -- and the next ``for`` yields exactly the samples not yet consumed."""
        s = self._state
        # Every sample consumed (the last step counts its whole batch on every rank, padding too)
        # is the next epoch's start: as a count past the epoch's samples, the state was refused.
        # Not under El Che: its ranks take different numbers of batches, so a rank's count passes
        # the epoch's size mid-epoch (its iterator says when this rank's last batch is out).
        done = s["done"] or (0 < self._epoch_end() <= s["consumed"] and not self._el_che())
        epoch, consumed = (s["epoch"] + 1, 0) if done else (s["epoch"], s["consumed"])
        if self._iterator is None and not s["done"] and s["consumed"] == 0:
            epoch = self._next_epoch
        return {"epoch": epoch, "samples_consumed": consumed, "world_size": self.world_size,
                "split": self._split[0] if self._split else None,
                "rank": self.rank, "samples": self._samples, "seed": self.options["seed"],
                "shuffle": self.options["shuffle"], "batch_size": self._batch,
                "sampler_type": self.options["sampler_type"], "num_samples": self.options["num_samples"],
                "_num_yielded": consumed // max(1, self.world_size)}

    def load_state_dict(self, state):
        for key in ("epoch", "samples_consumed", "samples", "seed", "shuffle"):
            if key not in state:
                raise ValueError(f"state_dict: missing {key!r} (not a stoker.Loader state)")
        if state["samples"] != self._samples:
            raise ValueError(f"state_dict: saved for a dataset of {state['samples']} samples, this one has {self._samples}")
        if state["seed"] != self.options["seed"] or state["shuffle"] != self.options["shuffle"]:
            raise ValueError("state_dict: saved with another seed or shuffle: the epoch's order would differ")
        # The sampler draws the order: a weighted or with-replacement draw (of num_samples) is not a
        # permutation, so a count of it means nothing in another sampler's order.
        family = {"weighted": "weighted", "random_with_replacement": "random_with_replacement"}
        saved = (family.get(state.get("sampler_type"), "permutation"), state.get("num_samples", self.options["num_samples"]))
        mine = (family.get(self.options["sampler_type"], "permutation"), self.options["num_samples"])
        if "sampler_type" in state and (saved[0] != mine[0] or (mine[0] != "permutation" and saved[1] != mine[1])):
            raise ValueError(f"state_dict: saved with the {state['sampler_type']} sampler (num_samples "
                             f"{saved[1]}), this loader has the {self.options['sampler_type']} sampler (num_samples "
                             f"{mine[1]}): the epoch's order would differ")
        epoch, consumed = int(state["epoch"]), int(state["samples_consumed"])
        if consumed < 0 or epoch < 0:
            raise ValueError(f"state_dict: epoch {epoch}, samples_consumed {consumed}: neither can be negative")
        if 0 < self._epoch_end() <= consumed:  # the epoch was consumed whole (a state saved before this rule)
            epoch, consumed = epoch + 1, 0
        # An El Che count is one rank's: refused mid-epoch whichever split this loader has (a
        # plain loader took it as a global count and skipped samples no rank had served).
        if consumed and (self._el_che() or state.get("split") == "step_ms"):
            raise ValueError("state_dict: an El Che split (rank_step_ms) resumes at epoch boundaries only: ranks "
                             "take different numbers of batches, so one rank's count does not say the others'")
        if consumed and not self._plannable() and state.get("world_size") != self.world_size:
            what = "a dataset with its own order (WebDataset)" if self._own_order else \
                f"a {self.options['sampler_type']} sampler"
            raise ValueError(f"state_dict: {what} resumes only on the same world size "
                             f"({state.get('world_size')}, now {self.world_size})")
        self._close_iterator()
        self._next_epoch = epoch
        self._resume = (epoch, consumed) if consumed else None
        self._state = {"epoch": epoch, "consumed": consumed, "done": False}

    def _plan(self, epoch, consumed, **policy):
        o = self.options
        request = {"samples": self._samples, "world_size": self.world_size, "seed": o["seed"], "epoch": epoch,
                   "shuffle": o["shuffle"] and o["sampler_type"] != "sequential", "drop_last": o["drop_last"],
                   "resume_from": consumed, **policy}
        return _native.take_json(lib.stoker_plan(_native.encode(json.dumps(request))))["ranks"][self.rank]

    def _epoch_draws(self):
        """Samples an epoch draws, over every rank: num_samples for the weighted and with-replacement
        samplers (when set), else the dataset's size. (A state counted against the dataset's size
        ended a longer draw early, and its resume skipped the rest.)"""
        o = self.options
        if o["sampler_type"] in ("weighted", "random_with_replacement") and o["num_samples"] > 0:
            return o["num_samples"]
        return self._samples

    def _epoch_end(self):
        """What an epoch's steps consume in all, over every rank: every draw, or with drop_last
        only the whole steps (a state saved after the last of them is the next epoch's start)."""
        draws = self._epoch_draws()
        if self.options["drop_last"] and not self._el_che():
            return min(draws, len(self) * self._batch * self.world_size)
        return draws

    def _el_che(self):
        return self._split is not None and self._split[0] == "step_ms"

    def _plannable(self):
        """Whether the planner can deal what is left of an epoch (onto any world size)."""
        return self.options["sampler_type"] in ("random", "sequential", "distributed") and not self._own_order

    def _remaining_order(self, epoch, consumed):
        if self._plannable():
            return self._plan(epoch, consumed)["indices"]
        return self.order(epoch).tolist()[consumed // max(1, self.world_size):]

    def _planned(self, epoch, consumed):
        """This rank's order and batch sizes in a split for unequal GPUs."""
        kind, values = self._split
        mine = self._plan(epoch, consumed, batch_size=self._batch, **{kind: values})
        if kind == "weights":
            return mine["indices"], mine["step_sizes"]
        sizes = []  # El Che: each round's share is whole batches (the last one of the epoch short)
        for share in mine["step_sizes"]:
            sizes += [self._batch] * (share // self._batch) + ([share % self._batch] if share % self._batch else [])
        return mine["indices"], sizes

    def _consumed_per_row_and_step(self):
        """What one step consumes of the epoch's global order (every rank in lockstep): a split's
        step is a fixed number of samples (0 here otherwise), else each row stands for one per rank."""
        if self._split is not None:
            return 1, self._batch * self.world_size
        return max(1, self.world_size), 0

    # --- internals ------------------------------------------------------------------------------

    def _require(self):
        if not self._handle:
            raise ValueError("stoker.Loader: closed")
        return self._handle

    def _close_iterator(self):
        it, self._iterator = self._iterator, None
        if it is not None:
            it.close()

    def _forget_after_fork(self):
        # The child has none of the parent's threads: never join or free them there.
        self._handle = None
        if self._iterator is not None:
            self._iterator._handle = None
        self._iterator = None


class _EpochIterator:
    def __init__(self, loader, epoch, order, sizes=None, plan_next=None):
        self._loader = loader
        self.epoch = epoch
        self._indices = None  # of the last batch, fetched from the core when asked for
        self._fields = (ctypes.c_void_p * _MAX_FIELDS)()
        self._taking = threading.Lock()  # the ctypes path's fields, one thread at a time
        self.next_epoch_queued = False  # whether the next epoch's batches are being made already
        self._ahead, self._ahead_thread, self._plan_next, self._first_out = None, None, None, False
        if order is None:
            handle = lib.stoker_epoch_start(loader._require(), epoch, None, -1, None, 0)
        else:
            buf = (ctypes.c_int64 * len(order))(*order)
            cut = (ctypes.c_int64 * len(sizes))(*sizes) if sizes is not None else None
            handle = lib.stoker_epoch_start(loader._require(), epoch, buf, len(order), cut,
                                            len(sizes) if sizes is not None else 0)
        if not handle:
            _native.raise_last_error()
        self._handle = handle
        self._per_row, self._per_step = loader._consumed_per_row_and_step()
        # El Che: this rank's batches in the epoch; once the last is out, the epoch is done for it.
        self._batches_left = len(sizes) if loader._el_che() and sizes is not None else None
        self._batch_rows = loader._batch
        self._as_dict = loader.as_dict
        if plan_next is not None and loader.options["num_workers"] > 0 and loader.options["persistent_workers"]:
            self._plan_next = plan_next

    def _plan_ahead(self):
        plan_next, self._plan_next = self._plan_next, None

        def plan():
            try:
                self._ahead = plan_next()
            except Exception:  # the next epoch plans itself when it starts, as without this
                self._ahead = None
        self._ahead_thread = threading.Thread(target=plan, name="stoker-plan-ahead", daemon=True)
        self._ahead_thread.start()

    def _look_ahead(self):
        """A split's next epoch: planned on a thread from the second batch on (planning would delay
        the first), queued behind this epoch once planned."""
        if self._plan_next is not None:
            if self._first_out:
                self._plan_ahead()
            self._first_out = True
        elif not self._ahead_thread.is_alive():
            self._queue_ahead()

    def _queue_ahead(self):
        """Queues the next epoch's planned order behind this one (once its plan is ready)."""
        self._ahead_thread, ahead = None, self._ahead
        if ahead is None or not self._handle:
            return
        epoch, order, sizes = ahead
        buf = (ctypes.c_int64 * len(order))(*order)
        cut = (ctypes.c_int64 * len(sizes))(*sizes)
        if lib.stoker_epoch_queue_next(self._handle, epoch, buf, len(order), cut, len(sizes)) == 1:
            self.next_epoch_queued = True
            self._loader._queued = ahead

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    @property
    def indices(self):
        """The sample indices (int64) of the batch yielded last."""
        if self._indices is None and self._handle:
            pointer = lib.stoker_epoch_indices(self._handle)
            if pointer:
                self._indices = _native.tensor_from_dlpack(pointer)
        return self._indices

    def __next__(self):
        # The per-batch path: a Fashion-MNIST batch takes ~40 us to make on 2 cores, so every
        # attribute lookup and call here shows in the figures (hence the module-level aliases).
        handle = self._handle
        if not handle:
            raise StopIteration
        fields = self._fields
        # One thread at a time from the call until its pointers are wrapped: `fields` is the
        # iterator's, and two threads sharing the iterator wrapped each other's batches (every
        # deleter ran twice: heap corruption).
        with self._taking:
            try:
                n = _epoch_next(handle, _WAIT_MS, fields, _MAX_FIELDS)
                while n == _NOT_READY:  # waits of _WAIT_MS, so Ctrl-C reaches Python between them
                    n = _epoch_next(handle, _WAIT_MS, fields, _MAX_FIELDS)
            except BaseException:  # KeyboardInterrupt: stop the workers before it propagates
                self.close()
                raise
            if n <= 0:
                self._end(n)
            first = _from_dlpack(_capsule_new(fields[0], _DLTENSOR, None))
            if n == 2:
                batch = (first, _from_dlpack(_capsule_new(fields[1], _DLTENSOR, None)))
            else:
                batch = (first, *[_from_dlpack(_capsule_new(fields[i], _DLTENSOR, None)) for i in range(1, n)])
        return self._hand_out(batch)

    def _end(self, n):
        """The epoch's end (n == 0) or a worker's error (n < 0): the workers stop, and it is said.
        Closed (by another thread, a signal handler, atexit, while this one waited): the loop ends,
        the epoch not done."""
        self.close()
        if n == _CLOSED:
            raise StopIteration
        if n < 0:
            _native.raise_last_error()
        self._loader._state["done"] = True
        raise StopIteration

    def _hand_out(self, batch):
        """A batch's bookkeeping, then the batch (a dict with as_dict)."""
        self._indices = None
        if self._plan_next is not None or self._ahead_thread is not None:
            self._look_ahead()
        loader = self._loader
        # Samples of the epoch's global order this step consumed (every rank in lockstep): a whole
        # batch, also one that came short with skip_bad_samples (counted by its rows, a resumed
        # epoch served again the samples before the skips); the last step's excess is capped where
        # state_dict reads it.
        loader._state["consumed"] += self._per_step or self._batch_rows * self._per_row
        if self._batches_left is not None:
            self._batches_left -= 1
            if self._batches_left == 0:
                loader._state["done"] = True
        if loader._bool_fields:
            batch = tuple(t.view(torch.bool) if i in loader._bool_fields else t for i, t in enumerate(batch))
        if self._as_dict:
            return dict(zip(loader.fields, batch))
        return batch

    def close(self):
        handle, self._handle = self._handle, None
        if handle:
            lib.stoker_epoch_free(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _BatchesEpochIterator(_EpochIterator):
    """The per-batch path through the extension stoker._batches: one call waits (GIL released,
    Ctrl-C seen between waits) and returns the batch as the core's own tensors."""

    def __next__(self):
        handle = self._handle
        if not handle:
            raise StopIteration
        try:
            batch = _batches_next(handle, _WAIT_MS)
        except BaseException:  # KeyboardInterrupt: stop the workers before it propagates
            self.close()
            raise
        if batch.__class__ is int:
            self._end(batch)
        return self._hand_out(batch)


def _close_all():
    with _live_lock:
        loaders = list(_live)
    for loader in loaders:
        try:
            loader.close()
        except Exception:
            pass
    # A daemon thread may still be inside a call (waiting for a batch): its loader ends on that
    # thread once the call sees the close. Let it, before the process tears down what it uses.
    lib.stoker_quiesce(2000)


def _after_fork_in_child():
    for loader in list(_live):
        loader._forget_after_fork()
    lib.stoker_forget_calls_after_fork()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
