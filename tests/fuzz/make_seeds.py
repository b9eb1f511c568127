#!/usr/bin/python3
"""Writes the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/.

Seeds are real files of each format, small on purpose (libFuzzer mutates them): the official
safetensors samples, files written by NumPy and by Debian's PyTorch (torch.save), and the JSON and
text inputs the CLI and the workbench accept. Run with Debian's python3 (python3-torch,
python3-numpy); the output is committed, so the suites never need to run this.
"""
import gzip
import io
import json
import os
import shutil
import struct
import sys
import zipfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
SAMPLES = os.path.join(HERE, "..", "data", "safetensors-samples")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] in file order."""
    header, offset, blob = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def torch_save(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    # safetensors: the official samples plus every dtype family and metadata.
    for f in sorted(os.listdir(SAMPLES)):
        if f.endswith(".safetensors"):
            data = open(os.path.join(SAMPLES, f), "rb").read()
            put("safetensors_header", "sample-" + f, data)
            put("safetensors_file", "sample-" + f, data)
    mixed = safetensors([("a", "F32", [2, 2], bytes(16)), ("b", "BF16", [3], bytes(6)), ("c", "U16", [1], bytes(2)),
                         ("d", "F8_E4M3", [4], bytes(4)), ("e", "BOOL", [], bytes(1)), ("z", "I64", [0, 3], b"")],
                        metadata={"format": "pt"})
    put("safetensors_header", "mixed-dtypes.safetensors", mixed)
    put("safetensors_file", "mixed-dtypes.safetensors", mixed)
    put("safetensors_file", "empty.safetensors", safetensors([]))

    # .npy: NumPy's own writer, every version, order and byte order the reader supports.
    def npy(arr, version=None):
        buf = io.BytesIO()
        if version is None:
            np.save(buf, arr)
        else:
            np.lib.format.write_array(buf, arr, version=version)
        return buf.getvalue()
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    put("npy", "f32-c.npy", npy(base))
    put("npy", "f32-fortran.npy", npy(np.asfortranarray(base)))
    put("npy", "f64-big-endian.npy", npy(base.astype(">f8")))
    put("npy", "u8-v2.npy", npy(np.arange(6, dtype=np.uint8), version=(2, 0)))
    put("npy", "bool-3d.npy", npy(np.ones((2, 1, 2), dtype=bool)))
    put("npy", "i64-scalar.npy", npy(np.int64(7)))
    put("npy", "c64.npy", npy(np.array([1 + 2j], dtype=np.complex64)))
    put("npy", "i16-empty.npy", npy(np.zeros((0, 5), dtype=np.int16)))

    # IDX (MNIST family): images u8 and labels, plain and gzip, plus an int32 and a float file.
    def idx(type_code, dims, data):
        return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data
    images = idx(0x08, [2, 3, 3], bytes(range(18)))
    put("idx", "images-u8", images)
    put("idx", "images-u8.gz", gzip.compress(images))
    put("idx", "labels-u8", idx(0x08, [4], bytes([1, 2, 3, 9])))
    put("idx", "i32", idx(0x0C, [2], struct.pack(">ii", -1, 5)))
    put("idx", "f32", idx(0x0D, [1, 2], struct.pack(">ff", 1.5, -2.0)))
    put("idx", "f64-gz", gzip.compress(idx(0x0E, [1], struct.pack(">d", 3.25))))

    # .pt files from torch.save, and their data.pkl for the unpickler alone.
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    pts = {
        "state-dict.pt": {"weight": w, "bias": torch.zeros(4, dtype=torch.float16)},
        "views-shared.pt": {"full": w, "row": w[1], "col": w[:, 2], "t": w.t()},
        "nested.pt": {"model": {"layers": [{"w": torch.ones(2, 2)}, {"w": torch.ones(1)}]}, "epoch": 3,
                      "lr": 0.1, "name": "run", "flags": (True, None)},
        "dtypes.pt": {"i8": torch.tensor([1], dtype=torch.int8), "bf16": torch.ones(2, dtype=torch.bfloat16),
                      "i64": torch.tensor([1, 2]), "b": torch.tensor([True]), "f64": torch.zeros(1, dtype=torch.float64),
                      "scalar": torch.tensor(2.5)},
        "parameter.pt": {"p": torch.nn.Parameter(torch.ones(3))},
        "module.pt": torch.nn.Linear(3, 2).state_dict(),
    }
    for name, obj in pts.items():
        data = torch_save(obj)
        put("pt", name, data)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            put("unpickle", name.replace(".pt", ".pkl"), z.read(pkl))

    # HF index next to the fuzz target's two shards (see fuzz_hf_index.cpp).
    put("hf_index", "valid.json", json.dumps({
        "metadata": {"total_size": 44},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                       "c": "model-00002-of-00002.safetensors"}}, indent=2))
    put("hf_index", "missing-tensor.json", json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    put("hf_index", "outside.json", json.dumps({"weight_map": {"a": "../model-00001-of-00002.safetensors"}}))

    # metadata.json next to the fuzz target's two rank files (see fuzz_ranks_metadata.cpp).
    put("ranks_metadata", "valid.json", json.dumps({
        "num_ranks": 2,
        "tensor_specs": {"b": {"full_shape": [2], "shard_dim": None, "shard_sizes": [2, 2]},
                         "w": {"full_shape": [3, 3], "shard_dim": 0, "shard_sizes": [2, 1]}}}, indent=2))
    put("ranks_metadata", "wrong-sizes.json", json.dumps({
        "num_ranks": 2,
        "tensor_specs": {"b": {"full_shape": [4], "shard_dim": 0, "shard_sizes": [2, 2]},
                         "w": {"full_shape": [3, 3], "shard_dim": 1, "shard_sizes": [2, 1]}}}))

    # LoaderOptions JSON: the knobs as options files and the workbench write them.
    put("loader_options", "defaults.json", "{}")
    put("loader_options", "gpu.json", json.dumps({
        "batch_size": 256, "drop_last": False, "shuffle": True, "seed": 7, "num_workers": 3, "prefetch": 8,
        "loading_mode": "streaming", "reader_mode": "read", "part_size": 1048576, "max_inflight_parts": 2,
        "pin_memory": True, "timeout": 2.5, "memory_format": "nhwc", "vram_max_usage": 0.8,
        "multiprocessing_context": "spawn", "enable_transforms": True, "reuse_buffers": True}))
    put("loader_options", "weighted.json", json.dumps({
        "sampler_type": "weighted", "weights": [0.5, 1, 2.5], "num_samples": 10, "generator_seed": 3}))
    put("loader_options", "distributed.json", json.dumps({
        "sampler_type": "distributed", "shard_rank": 1, "shard_world_size": 4, "persistent_workers": False}))

    # Telemetry lines as the publisher writes them (and a bad line between them).
    record = {"time": 1763800000.5, "host": "node-1", "pid": 4242, "rank": 1, "worker": 0, "device": "cuda:0",
              "epoch": 2, "step": 17, "steps_total": 234, "samples_per_s": 51234.5, "bytes_per_s": 1.6e8,
              "batch_latency_p50_ms": 1.25, "batch_latency_p99_ms": 3.5, "data_wait_ms": 0.4, "step_ms": 12.0,
              "prefetch_depth": 8, "ready": 6, "mode": "resident", "mem_used": 1 << 30, "mem_reserved": 2 << 30,
              "mem_allocated": 1 << 29, "mem_total": 80 << 30, "epoch_end": False}
    put("telemetry", "records.jsonl", json.dumps(record) + "\n" + "{not json\n" + json.dumps({"rank": 3}) + "\n")
    put("telemetry", "one.jsonl", json.dumps(record))

    # Dataset specs, without the "synthetic:" the target adds.
    for i, s in enumerate(["1000,3x32x32,u8,100", "60000,1x28x28", "10,4,f16", "5,2x2,i64,0", "0,3"]):
        put("dataset_spec", "spec-%d.txt" % i, s)

    for i, s in enumerate(["data/train-{000000..000099}.tar", "x-{a,b,c}-{0..9}.tar", "shard.tar", "x-{9..10}.tar",
                           "x-{9223372036854775806..9223372036854775807}.tar"]):
        put("shard_pattern", "pattern-%d.txt" % i, s)

    for i, s in enumerate(["512MiB", "5GB", "2KB", "1048576", "1.5 GiB", "0"]):
        put("byte_size", "size-%d.txt" % i, s)

    for i, s in enumerate([":7070", "127.0.0.1:29650", "tcp://localhost:7070", "[::1]:80", "host:0"]):
        put("socket_address", "address-%d.txt" % i, s)

    # Replies to a GET of ranges 10-19, 100-149 and 900-999 (the target's), in nginx 1.22's layout
    # (captured: CRLF, then per part the delimiter, Content-Type, Content-Range, a blank line, the
    # bytes, CRLF; the closing delimiter). Input: Content-Type, newline, Content-Range, newline, body.
    obj = bytes((i * 37 + 11) % 256 for i in range(1000))
    def byteranges(parts, boundary="00000000000000000001", preamble=b"\r\n"):
        body = preamble
        for first, last in parts:
            body += b"--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes %d-%d/1000\r\n\r\n" % (boundary.encode(), first, last)
            body += obj[first:last + 1] + b"\r\n"
        return body + b"--%s--\r\n" % boundary.encode()
    put("multipart_ranges", "nginx.txt", b"multipart/byteranges; boundary=00000000000000000001\n\n" + byteranges([(10, 19), (100, 149), (900, 999)]))
    put("multipart_ranges", "reordered-joined.txt", b'multipart/byteranges; boundary="a b"\n\n' + byteranges([(900, 999), (5, 160)], "a b", b"preamble\r\n"))
    put("multipart_ranges", "one-part.txt", b"text/plain\nbytes 10-19/1000\n" + obj[10:20])

    # DCP .metadata: real ones from Debian's torch 1.13 (one process, a 2-process Gloo job with
    # ShardedTensors) and the torch 2.x layout (tests/ckpt/dcp_fixtures.py).
    import subprocess, tempfile
    fixtures = os.path.join(HERE, "..", "ckpt", "dcp_fixtures.py")
    with tempfile.TemporaryDirectory() as tmp:
        for args in (["single", tmp + "/single"], ["sharded", tmp + "/sharded", "1"],
                     ["torch2", tmp + "/single", tmp + "/torch2"]):
            subprocess.run([sys.executable, fixtures] + args, check=True)
        for name in ("single", "sharded", "torch2"):
            put("dcp_metadata", name + ".metadata", open(os.path.join(tmp, name, ".metadata"), "rb").read())
    media_seeds()


def media_seeds():
    """Seeds of the parsers added with the image datasets and zstd DCP items: DCP items (plain and
    zstd-compressed), small JPEGs and PNGs of each kind the decoder takes, a WebDataset shard."""
    import tarfile
    import zstandard
    from PIL import Image
    item = torch_save(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    put("dcp_item", "tensor.item", item)
    put("dcp_item", "strided.item", torch_save(torch.arange(12, dtype=torch.int16).reshape(3, 4).t()))
    put("dcp_item", "tensor.item.zst", zstandard.ZstdCompressor().compress(item))
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:  # no content size, as DCP
        w.write(item)
    put("dcp_item", "tensor.stream.zst", buf.getvalue())

    rgb = Image.new("RGB", (24, 16))
    rgb.putdata([(x * 10, y * 15, (x + y) * 5) for y in range(16) for x in range(24)])
    def encoded(image, fmt, **kw):
        out = io.BytesIO()
        image.save(out, fmt, **kw)
        return out.getvalue()
    put("image_decode", "baseline.jpg", encoded(rgb, "JPEG", quality=80))
    put("image_decode", "progressive.jpg", encoded(rgb, "JPEG", quality=80, progressive=True))
    put("image_decode", "gray.jpg", encoded(rgb.convert("L"), "JPEG"))
    put("image_decode", "subsampled-444.jpg", encoded(rgb, "JPEG", subsampling=0))
    put("image_decode", "rgb.png", encoded(rgb, "PNG"))
    put("image_decode", "gray.png", encoded(rgb.convert("L"), "PNG"))
    put("image_decode", "palette.png", encoded(rgb.convert("P"), "PNG"))
    put("image_decode", "rgba.png", encoded(rgb.convert("RGBA"), "PNG"))
    put("image_decode", "lossy.webp", encoded(rgb, "WEBP", quality=80))
    put("image_decode", "lossless.webp", encoded(rgb, "WEBP", lossless=True))
    put("image_decode", "rgba.webp", encoded(rgb.convert("RGBA"), "WEBP", quality=80))
    put("image_decode", "animated.webp", encoded(rgb, "WEBP", save_all=True, append_images=[rgb.rotate(90)], duration=50))
    put("image_decode", "rgb.tif", encoded(rgb, "TIFF"))
    put("image_decode", "lzw.tif", encoded(rgb, "TIFF", compression="tiff_lzw"))
    put("image_decode", "palette.tif", encoded(rgb.convert("P"), "TIFF"))
    put("image_decode", "rgba.tif", encoded(rgb.convert("RGBA"), "TIFF"))
    put("image_decode", "rgb.bmp", encoded(rgb, "BMP"))
    put("image_decode", "palette.bmp", encoded(rgb.convert("P"), "BMP"))
    put("image_decode", "onebit.bmp", encoded(rgb.convert("1"), "BMP"))

    shard = io.BytesIO()
    with tarfile.open(fileobj=shard, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, data in (("s0.jpg", encoded(rgb, "JPEG", quality=50)), ("s0.cls", b"3"),
                          ("s1.png", encoded(rgb.convert("L"), "PNG")), ("s1.cls", b"7")):
            info = tarfile.TarInfo(key)
            info.size, info.mtime = len(data), 1763800000
            tar.addfile(info, io.BytesIO(data))
    put("webdataset", "shard.tar", shard.getvalue())
    # DALI indexes over fuzz_wds_index's fixed 8 KiB shard (v1.2 with names, v1.1 without).
    put("wds_index", "v12.idx", "v1.2 2\njpg 512 1000 s0.jpg cls 2048 1 s0.cls\npng 3072 900 s1.png cls 4608 2 s1.cls\n")
    put("wds_index", "v11.idx", "v1.1 1\ncls 512 1 jpg 1536 600\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--media"]:  # only the seeds of the newer parsers, the rest left as they are
        sys.exit(media_seeds())
    sys.exit(main())
