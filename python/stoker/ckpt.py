"""Checkpoints from a training script: the engine behind `stoker ckpt inspect|convert|verify`, in
process (no subprocess), with a progress callback that can cancel."""

import os

from . import _native
from ._native import lib
from .tuning import _callback


def inspect(path):
    """``stoker ckpt inspect --json``: format, world size, tensors (name, dtype, shape, shards)."""
    return _native.take_json(lib.stoker_ckpt_inspect(_native.encode_path(path)))


def convert(src, dst, to, *, dtype="keep", memory_budget="256MiB", jobs=0, resume=False, force=False,
            dry_run=False, include=(), exclude=(), rank=0, world_size=1, progress=None):
    """Reshards `src` into `dst` as `to` ("ranks:M", "hf", "hf:5GB", "single", "pt", "dcp:M").

    Written atomically and journalled: ``resume=True`` finishes an interrupted conversion.
    `progress(done_bytes, total_bytes, item)` is called from the engine's threads; returning True
    cancels (CancelledError; finished files stay, partial ones go). Returns
    ``stoker ckpt convert --json``'s document (``dry_run=True``: the plan).
    """
    request = {"to": to, "dtype": dtype, "memory_budget": str(memory_budget), "jobs": int(jobs), "resume": resume,
               "force": force, "dry_run": dry_run, "include": list(include), "exclude": list(exclude),
               "rank": int(rank), "world_size": int(world_size)}
    return _callback(progress).run(lambda cb: _native.take_json(
        lib.stoker_ckpt_convert(_native.encode_path(src), _native.encode_path(dst),
                                _native.encode(_native.dumps(request)), cb, None)))


def verify(a, b, *, progress=None):
    """Whether two checkpoints in any layouts hold the same tensors (names, shapes, values):
    ``{"equal": bool, "tensors_compared": n, "non_tensor_items_not_compared": k,
    "first_difference": {...} | None}`` (verify compares tensors; DCP's non-tensor items are counted)."""
    return _callback(progress).run(lambda cb: _native.take_json(
        lib.stoker_ckpt_verify(_native.encode_path(a), _native.encode_path(b), cb, None)))
