"""Keyword arguments -> LoaderOptions JSON: DataLoader's names where the meaning is the same,
LoaderOptions' knob names elsewhere, a preset or a saved options file underneath."""

import json
import operator
import os

from . import _native

# DataLoader's defaults where a script would otherwise change behaviour by switching.
_DATALOADER_DEFAULTS = {"batch_size": 1, "shuffle": False, "drop_last": False}

# DataLoader arguments that have no meaning for a loader that reads dataset specs natively.
_NOT_TAKEN = {
    "collate_fn": "Stoker collates its fields itself (one tensor per field, dim 0 = sample)",
    "worker_init_fn": "Stoker's workers are threads of the core, not Python processes",
    "batch_sampler": "give batch_size (and sampler=, weights= or rank=/world_size=) instead",
    "generator": "give seed= (epoch e draws from seed + e, as DistributedSampler does)",
    "pin_memory_device": "give device= (pinned staging is for that device)",
}

_SAMPLERS = {"random", "sequential", "distributed", "weighted", "random_with_replacement"}

_knob_names = None


def knob_names():
    global _knob_names
    if _knob_names is None:
        _knob_names = [k["name"] for k in _native.take_json(_native.lib.stoker_knobs())]
    return _knob_names


def preset(name, rank=0, world_size=1):
    """The LoaderOptions of a preset ("gpu_optimized", "distributed_optimized", "debug_mode")."""
    return _native.take_json(_native.lib.stoker_preset(_native.encode(name), int(rank), int(world_size)))


def _base(options, rank, world_size):
    """The options underneath the keywords: a dict, a preset name or a saved JSON file."""
    if options is None:
        return dict(_DATALOADER_DEFAULTS)
    if isinstance(options, dict):
        # A dict names some knobs; the rest are DataLoader's, as without options= (without the
        # defaults, {"num_workers": 0} batched 32, shuffled and dropped the last batch).
        return {**_DATALOADER_DEFAULTS, **options}
    if isinstance(options, (str, os.PathLike)):
        text = os.fspath(options)
        if text.endswith(".json") or os.sep in text or os.path.exists(text):
            if not os.path.exists(text):
                raise FileNotFoundError(f"{text}: no such options file")
            with open(text, encoding="utf-8") as f:
                try:
                    loaded = json.load(f)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{text}: not JSON: {e}") from None
            if not isinstance(loaded, dict):
                raise ValueError(f"{text}: a LoaderOptions file holds one JSON object")
            return {**_DATALOADER_DEFAULTS, **loaded}  # a file the workbench saved names every knob
        return preset(text, rank or 0, world_size or 1)
    raise TypeError(f"options= takes a dict, a preset name or a LoaderOptions JSON file, not {type(options).__name__}")


def named_knobs(options):
    """The knobs options= names (a preset names them all; a dict or a saved file, its keys)."""
    return set() if options is None else set(_base(options, 0, 1))


def whole_number(name, value):
    """An int argument as DistributedSampler indexes with it: ints, numpy and torch integers; a float
    such as rank=1.5 is refused (int() took it as rank 1, a share another process also read)."""
    if isinstance(value, str):  # torchrun's variables
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name}: not a whole number ({value!r})") from None
    if isinstance(value, bool):
        raise TypeError(f"{name}= takes a whole number, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}= takes a whole number, not {value!r}") from None


def distributed_env(rank, world_size):
    """rank and world size: the arguments, else torchrun's RANK / WORLD_SIZE; None where neither says."""
    if rank is None and "RANK" in os.environ:
        rank = whole_number("RANK", os.environ["RANK"])
    if world_size is None and "WORLD_SIZE" in os.environ:
        world_size = whole_number("WORLD_SIZE", os.environ["WORLD_SIZE"])
    rank = None if rank is None else whole_number("rank", rank)
    world_size = None if world_size is None else whole_number("world_size", world_size)
    if rank is None and world_size is not None and world_size > 1:
        # As DistributedSampler: the process group's rank. Taken as 0, every process of an
        # mp.spawn job read rank 0's share, and the others' were never read.
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(f"world_size={world_size} without rank= (nor RANK in the environment, nor an "
                             f"initialized torch.distributed): every process would read rank 0's share")
        rank = dist.get_rank()
    return rank, world_size


def build(options=None, *, rank=None, world_size=None, sampler=None, prefetch_factor=None, **given):
    """Validated LoaderOptions (every knob) from the keywords. Unknown keywords raise TypeError."""
    for name in list(given):
        if name in _NOT_TAKEN:
            raise TypeError(f"stoker.Loader: {name}= is not taken: {_NOT_TAKEN[name]}")
    unknown = [n for n in given if n not in knob_names()]
    if unknown:
        raise TypeError(f"stoker.Loader got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"it takes DataLoader's batch_size, shuffle, drop_last, num_workers, prefetch_factor, "
                        f"pin_memory, timeout, persistent_workers, sampler and the LoaderOptions knobs "
                        f"({', '.join(knob_names())})")
    rank, world_size = distributed_env(rank, world_size)
    merged = _base(options, rank or 0, world_size or 1)
    merged.update({k: v for k, v in given.items() if v is not None})
    if prefetch_factor is not None:
        # DataLoader's prefetch_factor counts batches per worker; Stoker's prefetch is the whole ring.
        merged["prefetch"] = int(prefetch_factor) * max(1, int(merged.get("num_workers", 2)))
    elif given.get("prefetch") is None and (options is None or given.get("num_workers") is not None):
        # No depth given: a ring deep enough for every worker (DataLoader's default two batches a
        # worker, at least 8), as `stoker bench --workers N` sizes it, and never shallower than a
        # saved setting's. A fixed depth of 4 left 11 of 15 workers idle on a 16-core GPU machine
        # (0.38x of stoker bench on an image folder).
        workers = int(merged.get("num_workers", 2))
        merged["prefetch"] = max(int(merged.get("prefetch", 1)), _native.lib.stoker_prefetch_for_workers(workers))
    if sampler is not None:
        if not isinstance(sampler, str) or sampler not in _SAMPLERS:
            raise TypeError(f"sampler= takes one of {sorted(_SAMPLERS)} (Stoker draws the order itself), "
                            f"not {sampler!r}")
        merged["sampler_type"] = sampler
    if given.get("num_samples") and merged.get("sampler_type", "random") not in ("weighted", "random_with_replacement"):
        # RandomSampler's num_samples without replacement (a shorter or longer epoch of whole
        # permutations) is not a Stoker sampler: taken silently, the epoch stayed the dataset's size.
        raise ValueError(f"num_samples: used only by sampler='weighted' and 'random_with_replacement' "
                         f"(this loader's sampler is {merged.get('sampler_type', 'random')!r})")
    # Without arguments or torchrun's variables, a saved distributed setting keeps its own shard.
    if world_size is None:
        world_size = int(merged.get("shard_world_size", 1))
        rank = int(merged.get("shard_rank", 0)) if rank is None else rank
    rank = 0 if rank is None else rank
    if world_size < 1 or not 0 <= rank < world_size:
        # Also rank= without world_size=: taken as one rank of one, it read the whole dataset.
        raise ValueError(f"rank: must be in [0, {world_size}) (got {rank}"
                         f"{'; give world_size= too' if world_size == 1 else ''})")
    if world_size > 1 or merged.get("sampler_type") == "distributed":
        if merged.get("sampler_type", "random") in ("random", "sequential", "distributed"):
            if merged.get("sampler_type") == "sequential":
                merged["shuffle"] = False
            merged["sampler_type"] = "distributed"
        # The weighted and with-replacement samplers deal one draw across the ranks (each rank its
        # share, as DistributedSampler deals its order); before, every rank took the whole draw.
        merged["shard_rank"], merged["shard_world_size"] = rank, world_size
    return _native.take_json(_native.lib.stoker_options_normalize(_native.encode(_native.dumps(merged))))
