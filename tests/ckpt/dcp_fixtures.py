"""Real PyTorch Distributed Checkpoints (DCP) written by Debian's torch 1.13, for Stoker's tests
and benchmarks. Each checkpoint comes with reference.pt: the same tensors, whole, by torch.save.

usage: dcp_fixtures.py single OUT           one process (no_dist): dtypes, a strided tensor, items
       dcp_fixtures.py sharded OUT [MIB]    a real 2-process Gloo job saving ShardedTensors:
                                            dim-0 shards (FSDP-like), a 2x2 grid of boxes, a
                                            replicated tensor; MIB scales the big tensor
       dcp_fixtures.py model OUT MIB        a 2-process Gloo job saving an MIB-sized transformer-like
                                            model, every parameter dim-0 sharded (FSDP's layout);
                                            no reference.pt (for benchmarks)
       dcp_fixtures.py columns OUT          a 2-process Gloo job saving a 1024x256 float32 tensor in
                                            two column halves (tensor parallelism's split of a
                                            row-parallel weight): each row lies in both items
       dcp_fixtures.py view OUT             one process: a 32 KiB strided view whose item holds
                                            its 16 MiB storage (torch.save of the view)
       dcp_fixtures.py torch2 SRC OUT       SRC's checkpoint with its .metadata re-pickled under
                                            torch >= 2.x module paths and fields
       dcp_fixtures.py torch2zstd SRC OUT   the same with every item zstd-compressed as torch >= 2.6's
                                            ZStandard extension stores it (needs python3-zstandard)
       dcp_fixtures.py bad SRC OUT          one broken copy of SRC per bad input, in OUT/<case>

Debian's torch 1.13 DCP does not import under Python 3.11 without dcp_compat (imported first).
"""
import copy, dataclasses, io, os, pickle, shutil, socket, struct, subprocess, sys, types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compat import dcp, fs13, md13, torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def single(out):
    g = torch.Generator().manual_seed(1)
    base = torch.randn(6, 4, generator=g)
    sd = {
        "model.embed.weight": torch.randn(10, 8, generator=g),
        "model.layers.0.weight": torch.randn(8, 8, generator=g).half(),
        "model.layers.0.bias": torch.randn(8, generator=g).bfloat16(),
        "model.head.weight": base.t(),  # strided: torch.save keeps the transpose
        "model.mask": torch.tensor([True, False, True]),
        "model.ids": torch.arange(-3, 4, dtype=torch.int64),
        "model.bytes": torch.arange(0, 250, 7, dtype=torch.uint8),
        "model.scale": torch.tensor(0.5),
        "optim.state.0.exp_avg": torch.randn(10, 8, generator=g),
        "step": 42,
        "config": {"lr": 0.001, "name": "run-7"},
    }
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out), no_dist=True)
    torch.save({k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}, os.path.join(out, "..", os.path.basename(out) + "-reference.pt"))


def view(out):
    """DCP's writer saves a view's chunk compactly; another writer may torch.save the view itself,
    whose item then holds the whole storage. The item is swapped for such a save."""
    big = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(3))
    sd = {"model.narrow.weight": big[:, :2]}
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out), no_dist=True)
    buf = io.BytesIO()
    torch.save(sd["model.narrow.weight"], buf)  # strided, with big's 16 MiB storage
    meta = _load(out)
    info = next(iter(meta.storage_data.values()))
    with open(os.path.join(out, info.relative_path), "wb") as f:
        f.write(buf.getvalue())
    info.offset, info.length = 0, len(buf.getvalue())
    _save(meta, out)
    torch.save({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "..", os.path.basename(out) + "-reference.pt"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sharded_rank(out, mib):
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    from torch.distributed._shard.metadata import ShardMetadata
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(7)
    rows = max(2, (mib << 20) // (256 * 4))
    big = torch.randn(rows, 256, generator=g)           # dim-0 shards, as FSDP
    uneven = torch.randn(7, 3, generator=g).double()    # 4 + 3 rows
    grid = torch.arange(6 * 10, dtype=torch.float32).reshape(6, 10)  # 2x2 boxes, 2 per rank
    rep = torch.randn(5, generator=g).half()            # replicated: every rank holds it whole

    def dim0(full, sizes):
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        shards = [Shard(full[starts[rank]:starts[rank] + sizes[rank]].clone(),
                        ShardMetadata([starts[rank]] + [0] * (full.dim() - 1), [sizes[rank]] + list(full.shape[1:]),
                                      f"rank:{rank}/cpu"))]
        return init_from_local_shards(shards, list(full.shape))

    half = rows // 2
    boxes = [((0, 0), (3, 6), 0), ((0, 6), (3, 4), 1), ((3, 0), (3, 6), 1), ((3, 6), (3, 4), 0)]
    mine = [Shard(grid[o[0]:o[0] + s[0], o[1]:o[1] + s[1]].clone(), ShardMetadata(list(o), list(s), f"rank:{r}/cpu"))
            for o, s, r in boxes if r == rank]
    sd = {
        "model.big.weight": dim0(big, [rows - half, half]),
        "model.uneven": dim0(uneven, [4, 3]),
        "model.grid": init_from_local_shards(mine, [6, 10]),
        "model.replicated": rep,
        "step": 100 + rank,
    }
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out))
    if rank == 0:
        torch.save({"model.big.weight": big, "model.uneven": uneven, "model.grid": grid, "model.replicated": rep},
                   os.path.join(out, "..", os.path.basename(out) + "-reference.pt"))


def _columns_rank(out, mib):
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    from torch.distributed._shard.metadata import ShardMetadata
    rank = dist.get_rank()
    full = torch.arange(1024 * 256, dtype=torch.float32).reshape(1024, 256)
    local = full[:, rank * 128:(rank + 1) * 128].clone()
    sd = {"model.columns.weight": init_from_local_shards(
        [Shard(local, ShardMetadata([0, rank * 128], [1024, 128], f"rank:{rank}/cpu"))], [1024, 256])}
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out))
    if rank == 0:
        torch.save({"model.columns.weight": full}, os.path.join(out, "..", os.path.basename(out) + "-reference.pt"))


def columns(out):
    _two_ranks("columns", out, 0, _columns_rank)


def _two_ranks(mode, out, mib, save_rank):
    """Runs save_rank(out, mib) in a real 2-process Gloo job: this script again, once per rank, with
    torchrun's variables set by hand (Debian's torch.distributed.run dies under Python 3.11)."""
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
        save_rank(out, mib)
        dist.barrier()
        dist.destroy_process_group()
        return
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, __file__, mode, out, str(mib)], env=dict(env, RANK=str(r)))
             for r in range(2)]
    codes = [p.wait(timeout=1800) for p in procs]
    if any(codes):
        sys.exit(f"a rank failed: exit codes {codes}")


def sharded(out, mib):
    _two_ranks("sharded", out, mib, _sharded_rank)


def _model_rank(out, mib):
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    from torch.distributed._shard.metadata import ShardMetadata
    rank = dist.get_rank()
    hidden = 1024
    # Per layer: q, k, v, o (hidden x hidden) and an MLP (4 hidden x hidden, hidden x 4 hidden): 12 hidden^2 floats,
    # 48 MiB at f32; the norm is small. As many layers as MIB holds.
    layer_mib = 12 * hidden * hidden * 4 >> 20
    layers = max(1, mib // layer_mib)
    g = torch.Generator().manual_seed(rank)
    sd = {}
    def shard(name, shape):
        rows = shape[0]
        sizes = [rows - rows // 2, rows // 2]
        start = sum(sizes[:rank])
        local = torch.randn([sizes[rank]] + list(shape[1:]), generator=g)
        sd[name] = init_from_local_shards(
            [Shard(local, ShardMetadata([start] + [0] * (len(shape) - 1), [sizes[rank]] + list(shape[1:]), f"rank:{rank}/cpu"))],
            list(shape))
    for i in range(layers):
        p = f"model.layers.{i}."
        for w in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shard(p + "self_attn." + w + ".weight", [hidden, hidden])
        shard(p + "mlp.up_proj.weight", [4 * hidden, hidden])
        shard(p + "mlp.down_proj.weight", [hidden, 4 * hidden])
        shard(p + "input_layernorm.weight", [hidden])
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out))


def model(out, mib):
    _two_ranks("model", out, mib, _model_rank)


def _load(src):
    with open(os.path.join(src, ".metadata"), "rb") as f:
        return pickle.load(f)


def _save(meta, out):
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def _compress_items(meta, out):
    """Every item of `out` stored the way torch >= 2.6's ZStandard extension stores it
    (`_extension.py`): zstd frames of the torch.save bytes written through zstandard's stream_writer
    (no content size in the frame header), transform_descriptors ["stream.zstd/1"]."""
    import zstandard
    by_file = {}
    for info in meta.storage_data.values():
        by_file.setdefault(info.relative_path, []).append(info)
    for rel, infos in by_file.items():
        path = os.path.join(out, rel)
        with open(path, "rb") as f:
            raw = f.read()
        with open(path, "wb") as f:
            for info in sorted(infos, key=lambda i: i.offset):
                buf = io.BytesIO()
                writer = zstandard.ZstdCompressor().stream_writer(buf, closefd=False)
                writer.write(raw[info.offset:info.offset + info.length])
                writer.close()
                info.offset, info.length = f.tell(), len(buf.getvalue())
                info.transform_descriptors = ["stream.zstd/1"]
                f.write(buf.getvalue())


def torch2(src, out, compress=False):
    """torch >= 2.4's layout of the same checkpoint: classes under torch.distributed.checkpoint,
    TensorProperties beside them, _MEM_FORMAT_ENCODING, StorageMeta with a PosixPath, version,
    transform_descriptors=None and planner_data mapping flat names to paths; `compress`: every
    item zstd-compressed (torch >= 2.6)."""
    import enum, pathlib
    shutil.copytree(src, out)
    meta = _load(src)
    mdmod = types.ModuleType("torch.distributed.checkpoint.metadata")
    fsmod = types.ModuleType("torch.distributed.checkpoint.filesystem")
    sys.modules.setdefault("torch.distributed.checkpoint", types.ModuleType("torch.distributed.checkpoint"))
    sys.modules["torch.distributed.checkpoint.metadata"] = mdmod
    sys.modules["torch.distributed.checkpoint.filesystem"] = fsmod
    enc = enum.Enum("_MEM_FORMAT_ENCODING", "TORCH_CONTIGUOUS_FORMAT TORCH_CHANNELS_LAST TORCH_PRESERVE_FORMAT")
    enc.__module__ = mdmod.__name__

    @dataclasses.dataclass
    class StorageMeta:
        checkpoint_id: object = None
        save_id: str = ""
        load_id: str = ""
        modules: list = dataclasses.field(default_factory=list)

    class TensorProperties:  # 2.3+: pickled state is the same 5-tuple
        def __init__(self, state): self.state = state
        def __reduce_ex__(self, proto):
            return (copyreg_newobj, (TensorProperties,), self.state)
    import copyreg
    copyreg_newobj = copyreg.__newobj__
    TensorProperties.__setstate__ = lambda self, s: None

    for cls, mod in [(md13.Metadata, mdmod), (md13.TensorStorageMetadata, mdmod), (md13.ChunkStorageMetadata, mdmod),
                     (md13.BytesStorageMetadata, mdmod), (md13.MetadataIndex, mdmod), (StorageMeta, mdmod),
                     (TensorProperties, mdmod), (enc, mdmod), (fs13._StorageInfo, fsmod)]:
        cls.__module__ = mod.__name__
        cls.__qualname__ = cls.__name__
        setattr(mod, cls.__name__, cls)
    for entry in meta.state_dict_metadata.values():
        if isinstance(entry, md13.TensorStorageMetadata):
            p = entry.properties
            entry.properties = TensorProperties((p.dtype, p.layout, p.requires_grad,
                                                 enc.TORCH_CONTIGUOUS_FORMAT, p.pin_memory))
    for info in meta.storage_data.values():
        info.transform_descriptors = None
    meta.planner_data = {k: tuple(k.split(".")) for k in meta.state_dict_metadata}
    meta.storage_meta = StorageMeta(pathlib.PosixPath(out), "save-1", "", [])
    meta.version = "1.0.0"
    if compress:
        _compress_items(meta, out)
    _save(meta, out)


def bad(src, out):
    """One copy of SRC per bad input the reader must refuse."""
    os.makedirs(out, exist_ok=True)
    def case(name, mutate=None, meta_bytes=None):
        d = os.path.join(out, name)
        shutil.copytree(src, d)
        if meta_bytes is not None:
            with open(os.path.join(d, ".metadata"), "wb") as f:
                f.write(meta_bytes)
        elif mutate:
            meta = _load(src)
            mutate(meta, d)
            _save(meta, d)
        return d
    raw = open(os.path.join(src, ".metadata"), "rb").read()
    def tensors(meta):
        return [(k, v) for k, v in meta.state_dict_metadata.items() if isinstance(v, md13.TensorStorageMetadata)]
    def first_info(meta):
        return next(iter(v for k, v in meta.storage_data.items() if k.offset is not None))

    os.remove(os.path.join(case("missing-metadata"), ".metadata"))
    case("truncated-metadata", meta_bytes=raw[: len(raw) // 2])
    case("not-a-pickle", meta_bytes=b'{"state_dict_metadata": {}}')
    class Evil:
        def __reduce__(self): return (os.system, ("touch " + os.path.join(out, "PWNED"),))
    case("evil-class", mutate=lambda m, d: setattr(m, "planner_data", Evil()))
    def past_end(m, d): first_info(m).length += 10**6
    case("item-past-end", past_end)
    def missing_file(m, d): first_info(m).relative_path = "__9_9.distcp"
    case("missing-data-file", missing_file)
    def escape(m, d): first_info(m).relative_path = "../../etc/passwd"
    case("path-escapes", escape)
    def overlap(m, d):
        name, t = next((k, v) for k, v in tensors(m) if len(v.chunks) >= 2)
        c = t.chunks[1]; c.offsets = torch.Size([c.offsets[0] - 1] + list(c.offsets[1:]))
        # keep storage_data findable under the new offsets
        for k in list(m.storage_data):
            if k.fqn == name and k.offset == torch.Size([c.offsets[0] + 1] + list(c.offsets[1:])):
                m.storage_data[md13.MetadataIndex(name, c.offsets, k.index)] = m.storage_data.pop(k)
    case("chunks-overlap", overlap)
    def hole(m, d):
        name, t = next((k, v) for k, v in tensors(m) if len(v.chunks) >= 2)
        t.size = torch.Size([t.size[0] + 1] + list(t.size[1:]))
    case("chunks-leave-hole", hole)
    def exceed(m, d):
        name, t = next((k, v) for k, v in tensors(m) if len(v.chunks) >= 2)
        t.size = torch.Size([t.size[0] - 1] + list(t.size[1:]))
    case("chunk-exceeds-tensor", exceed)
    def wrong_dtype(m, d):
        name, t = next((k, v) for k, v in tensors(m) if v.properties.dtype == torch.float32)
        t.properties.dtype = torch.float64
    case("item-dtype-disagrees", wrong_dtype)
    def wrong_size(m, d):  # a chunk one row shorter than the tensor its item holds
        name, t = next((k, v) for k, v in tensors(m) if len(v.chunks) >= 2)
        c = t.chunks[0]
        c.sizes = torch.Size([c.sizes[0] - 1] + list(c.sizes[1:]))
    case("item-size-disagrees", wrong_size)
    def corrupt(m, d):
        info = first_info(m)
        with open(os.path.join(d, info.relative_path), "r+b") as f:
            # Its central directory and end records (zip64 included: a reader may find the zip64
            # records when only the last 22 bytes are gone, and then the item is intact).
            f.seek(info.offset + info.length - 1024)
            f.write(b"\xff" * 1024)
    case("item-zip-corrupt", corrupt)
    def zstd(m, d): first_info(m).transform_descriptors = ["stream.zstd/1"]  # says compressed, is not
    case("item-zstd-not-zstd", zstd)
    def rot13(m, d): first_info(m).transform_descriptors = ["stream.rot13/1"]  # DCP's example transform
    case("item-rot13", rot13)
    def zstd_item(m, d, plain):  # the first item's bytes replaced by `plain` compressed, appended
        import zstandard
        info = first_info(m)
        path = os.path.join(d, info.relative_path)
        packed = zstandard.ZstdCompressor().compress(plain)
        with open(path, "ab") as f:
            info.offset, info.length = f.tell(), len(packed)
            f.write(packed)
        info.transform_descriptors = ["stream.zstd/1"]
        return packed
    def zstd_truncated(m, d):
        info = first_info(m)
        with open(os.path.join(d, info.relative_path), "rb") as f:
            f.seek(info.offset)
            item = f.read(info.length)
        zstd_item(m, d, item)
        info.length -= 64  # the frame's end cut off
    case("item-zstd-truncated", zstd_truncated)
    def zstd_bomb(m, d): zstd_item(m, d, bytes(100 << 20))  # 100 MiB of zeros in a few KiB
    case("item-zstd-bomb", zstd_bomb)
    def zstd_huge_bomb(m, d):
        # A 1 GiB tensor declared by .metadata, its item a zstd stream of 1 GiB + 2 MiB of zeros (a
        # few KiB): refused once past the chunk's size, holding only the zip's head and tail.
        import zstandard
        name = "model.replicated"
        t = m.state_dict_metadata[name]
        size = torch.Size([1 << 29])  # float16: 1 GiB
        key = next(k for k in m.storage_data if k.fqn == name)
        info = m.storage_data.pop(key)
        t.size, t.chunks[0].sizes = size, size
        m.storage_data[md13.MetadataIndex(name, t.chunks[0].offsets, key.index)] = info
        z = zstandard.ZstdCompressor().compressobj()
        zeros = bytes(16 << 20)
        packed = b"".join(z.compress(zeros) for _ in range(64)) + z.compress(bytes(2 << 20)) + z.flush()
        with open(os.path.join(d, info.relative_path), "ab") as f:
            info.offset, info.length = f.tell(), len(packed)
            f.write(packed)
        info.transform_descriptors = ["stream.zstd/1"]
    case("item-zstd-huge-bomb", zstd_huge_bomb)
    def compress_in_place(d, info):  # the item's bytes compressed, appended to its file, pointed at
        with open(os.path.join(d, info.relative_path), "rb") as f:
            f.seek(info.offset)
            item = f.read(info.length)
        import zstandard
        packed = zstandard.ZstdCompressor().compress(item)
        with open(os.path.join(d, info.relative_path), "ab") as f:
            info.offset, info.length = f.tell(), len(packed)
            f.write(packed)
        info.transform_descriptors = ["stream.zstd/1"]
    def zstd_shared_item(m, d):  # two chunks naming one compressed item: each would decompress it
        name, t = next((k, v) for k, v in tensors(m) if len(v.chunks) >= 2)
        keys = [k for k in m.storage_data if k.fqn == name]
        first = m.storage_data[keys[0]]
        compress_in_place(d, first)
        for k in keys[1:]:
            m.storage_data[k] = copy.copy(first)
    case("item-zstd-shared", zstd_shared_item)
    def bytes_zstd_shared(m, d):  # a second non-tensor entry naming the first's compressed item
        key = next(k for k in m.storage_data if k.offset is None and k.fqn == "step")
        first = m.storage_data[key]
        compress_in_place(d, first)
        m.state_dict_metadata["step.copy"] = md13.BytesStorageMetadata()
        m.storage_data[md13.MetadataIndex("step.copy")] = copy.copy(first)
    case("bytes-zstd-shared", bytes_zstd_shared)
    def safetensors_item(m, d):  # DCP's opt-in SerializationFormat.SAFETENSORS: items are safetensors
        info = first_info(m)
        with open(os.path.join(d, info.relative_path), "r+b") as f:
            f.seek(info.offset)
            f.write(struct.pack("<Q", 8) + b'{"a":{}}')
    case("item-safetensors", safetensors_item)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "single": single(sys.argv[2])
    elif mode == "sharded": sharded(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    elif mode == "view": view(sys.argv[2])
    elif mode == "columns": columns(sys.argv[2])
    elif mode == "model": model(sys.argv[2], int(sys.argv[3]))
    elif mode == "torch2": torch2(sys.argv[2], sys.argv[3])
    elif mode == "torch2zstd": torch2(sys.argv[2], sys.argv[3], compress=True)
    elif mode == "bad": bad(sys.argv[2], sys.argv[3])
    else: sys.exit(__doc__)
