"""stoker.tune (the auto-tuner) and stoker.plan (the sharding planner) from Python."""


from . import _native, _options
from ._native import lib


class _Callback:
    """A ctypes progress callback calling progress(done, total, item); True from it cancels. An
    exception in it stops the work and is raised by run() (it was a bare CancelledError before,
    without the callback's error or traceback)."""

    def __init__(self, progress):
        self.error = None

        def call(_user, done, total, item):
            try:
                return 1 if progress(done, total, (item or b"").decode("utf-8", "replace")) else 0
            except BaseException as e:  # KeyboardInterrupt too: the work stops, the error goes up
                if self.error is None:
                    self.error = e
                return 1
        self.c = _native.PROGRESS(call) if progress else _native.PROGRESS()

    def run(self, work):
        try:
            return work(self.c)
        except _native.CancelledError:
            if self.error is not None:
                raise self.error
            raise


def _callback(progress):
    return _Callback(progress)


def tune(dataset, budget_s=60, *, device="cpu", options=None, progress=None, **fixed):
    """Searches the loader's knobs on `dataset` (a spec) within `budget_s` seconds.

    Returns ``stoker tune --json``'s document: ``options`` (the best setting, every knob; pass it
    as ``stoker.Loader(dataset, options=result["options"])``), ``best`` (its rate and 95 % interval),
    ``confidence`` (how sure, in words) and ``trials``. `fixed` sets knobs to start from;
    `progress(seconds_ms, budget_ms, change)` is called after each trial (True stops the search).
    """
    if not isinstance(dataset, str):
        raise TypeError("stoker.tune takes a dataset spec string")
    base = _options.build(options, **fixed)
    request = {"budget_s": float(budget_s), "device": str(device)}
    return _callback(progress).run(lambda cb: _native.take_json(
        lib.stoker_tune(_native.encode_path(dataset), _native.encode(_native.dumps(base)),
                        _native.encode(_native.dumps(request)), cb, None)))


def plan(samples, world_size, *, seed=0, epoch=0, shuffle=True, drop_last=False, batch_size=0, weights=None,
         step_ms=None, resume_from=0):
    """``stoker plan --json``: which samples each rank gets (DistributedSampler's indices without
    weights; per-rank weights for unequal GPUs; El Che from per-rank step times; a resume point)."""
    request = {"samples": samples, "world_size": world_size, "seed": seed, "epoch": epoch, "shuffle": shuffle,
               "drop_last": drop_last, "batch_size": batch_size, "weights": list(weights or []),
               "step_ms": list(step_ms or []), "resume_from": resume_from}
    return _native.take_json(lib.stoker_plan(_native.encode(_native.dumps(request))))
