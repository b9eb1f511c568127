"""Ranks that open the same remote WebDataset share their scans (the core's ScanExchange).

Without DALI indexes, opening `wds:` shards means scanning each shard's tar headers, which for a
remote shard fetches it. Alone, every rank of a job would fetch every shard to open the dataset.
Sharing, each rank scans only the remote shards of its own first deal (the ones it reads first, so
the bytes the scan brought feed its first epoch) and the ranks swap the resulting indexes with
torch.distributed.all_gather_object: N ranks fetch the shards once between them.

It is an all-gather, so every rank of the process group must open the loader: it is used when
torch.distributed is initialized with this loader's rank and world size (share_scans=None), or
forced (share_scans=True), or never (share_scans=False).
"""
from . import _native
from ._native import lib


def wanted(spec, options, share_scans):
    """Whether this loader's open shares scans (raises ValueError when asked for and impossible)."""
    if share_scans is False:
        return False
    why = _why_not(spec, options)
    if why and share_scans:
        raise ValueError(f"share_scans=True: {why}")
    return why is None


def _why_not(spec, options):
    if not isinstance(spec, str) or not spec.startswith("wds:"):
        return "only wds: specs are scanned to open"
    if ",index=" in spec:
        return "the spec reads DALI indexes (index=dali): nothing is scanned"
    if options.get("sampler_type") != "distributed" or options.get("shard_world_size", 1) <= 1:
        return "the loader is not one rank of several (rank=, world_size= or torchrun's variables)"
    try:
        import torch.distributed as dist
    except ImportError:
        return "torch.distributed is not available"
    if not dist.is_available() or not dist.is_initialized():
        return "torch.distributed is not initialized (init_process_group) for the ranks to swap their scans"
    if dist.get_world_size() != options["shard_world_size"] or dist.get_rank() != options["shard_rank"]:
        return (f"the process group (rank {dist.get_rank()} of {dist.get_world_size()}) is not this loader's "
                f"(rank {options['shard_rank']} of {options['shard_world_size']})")
    return None


_gloo = (None, None)  # (the default group, a Gloo group over its ranks) when that group is not Gloo


def _group(dist):
    """The group to swap scans over: Gloo (host memory). NCCL's all_gather_object would stage the
    scans on torch.cuda.current_device(), which a script may not have set yet when it builds its
    loaders (every rank on cuda:0). Made once per default group: one made for a group since
    destroyed is not a member of the new one."""
    global _gloo
    if dist.get_backend() == "gloo":
        return None
    world = dist.group.WORLD
    if _gloo[0] is not world:
        _gloo = (world, dist.new_group(backend="gloo"))  # a collective too: every rank reaches it here
    return _gloo[1]


class Exchange:
    """The callback the core calls once, on the opening thread, with this rank's scans."""

    def __init__(self):
        self.error = None
        self.callback = _native.EXCHANGE(self._call)

    def _call(self, _user, mine):
        try:
            import torch.distributed as dist
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine.decode("utf-8"), group=_group(dist))
            return lib.stoker_strdup(("[" + ",".join(gathered) + "]").encode("utf-8"))
        except BaseException as e:  # raised again by the Loader once the core has returned
            self.error = e
            return None
