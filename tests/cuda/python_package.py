#!/usr/bin/env python3
"""The Python package on a GPU (run by packaging/gpu-check.sh; skips without CUDA): batches on cuda:0
consumed on a side stream equal the host's samples; a batch kept past the next ones stays intact
(reuse_buffers, streaming); the loader's memory figures are torch.cuda's; tensors the script holds
become resident on the GPU; the loop's rate against `stoker bench` on the same settings; with
--photos, the image pipeline from Python into the GPU against `stoker bench` and torchvision's
ImageFolder + DataLoader, and the gap at the epoch boundary. One JSON line per check ({"check",
"ok", "skipped", "detail"}), the format of stoker_cuda_check, so gpu_report.py lists them with the
others.

    tests/cuda/python_package.py --build BUILD --data FASHION_MNIST_DIR [--photos IMAGE_FOLDER]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def last_json(out):
    # `stoker bench --json` prints one indented document; the Python peers print one JSON line last.
    out = out.strip()
    return json.loads(out if out.startswith("{\n") else out.splitlines()[-1])


def emit(check, ok, detail, skipped=False, **figures):
    print(json.dumps({"check": check, "ok": bool(ok), "skipped": skipped, "detail": detail, **figures}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--photos", default="", help="an image folder (class/image.jpg) for the image pipeline")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import torch
    if not torch.cuda.is_available():
        emit("python_package", True, "no CUDA device: skipped", skipped=True)
        return
    try:
        import stoker
    except Exception as e:  # the import itself is a check: a build for another torch is refused here
        emit("python_import", False, f"{type(e).__name__}: {e}")
        return
    path = "the extension stoker._batches" if stoker._native.batches else "ctypes (stoker._batches not built: no Python.h?)"
    emit("python_import", True, f"stoker {stoker.__version__} built for torch {stoker._native.build_info()['torch']}, "
                                f"imported {torch.__version__}; batches through {path}")
    spec = f"fashion-mnist:{a.data}"
    host = stoker.Loader(spec, batch_size=60000, num_workers=0)
    images, labels = next(iter(host))
    host.close()

    # Streaming into cuda:0, consumed on a side stream.
    try:
        loader = stoker.Loader(spec, batch_size=512, shuffle=True, device="cuda:0", loading_mode="streaming",
                               num_workers=4)
        side = torch.cuda.Stream()
        bad = batches = 0
        with torch.cuda.stream(side):
            it = iter(loader)
            for x, y in it:
                idx = it.indices
                bad += int(not (x.is_cuda and torch.equal(x.cpu(), images[idx]) and torch.equal(y.cpu(), labels[idx])))
                batches += 1
        emit("python_side_stream", bad == 0 and batches == len(loader),
             f"{batches} batches on a side stream, {bad} differing from the host's samples")
        loader.close()
    except Exception as e:
        emit("python_side_stream", False, f"{type(e).__name__}: {e}")

    # A batch kept past the next ones stays intact (its block is not recycled while held).
    try:
        loader = stoker.Loader(spec, batch_size=256, device="cuda:0", loading_mode="streaming", reuse_buffers=True,
                               num_workers=4)
        it = iter(loader)
        kept, _ = next(it)
        copy = kept.clone()
        for _ in range(50):
            next(it)
        torch.cuda.synchronize()
        emit("python_kept_batch_intact", torch.equal(kept, copy), "first batch after 50 more (reuse_buffers, streaming)")
        it.close()
        loader.close()
    except Exception as e:
        emit("python_kept_batch_intact", False, f"{type(e).__name__}: {e}")

    # Resident on cuda:0: memory figures are torch.cuda's; the Python loop against stoker bench.
    try:
        loader = stoker.Loader(spec, batch_size=1024, shuffle=True, device="cuda:0", num_workers=2)
        info = loader.describe()
        free, total = torch.cuda.mem_get_info()
        rates = []
        for _ in range(4):
            n, start = 0, time.perf_counter()
            for x, y in loader:
                n += x.shape[0]
            torch.cuda.synchronize()
            rates.append(n / (time.perf_counter() - start))
        py = sorted(rates[1:])[len(rates[1:]) // 2]
        bench = last_json(subprocess.run([os.path.join(a.build, "bin", "stoker"), "bench", "--dataset", spec,
                                           "--device", "cuda:0", "--batch-size", "1024", "--workers", "2", "--epochs",
                                           "4", "--json"], check=True, capture_output=True, text=True).stdout)
        emit("python_memory_figures", info["memory"]["total"] == total and info["mode"] == "resident",
             f"mode {info['mode']}, total {info['memory']['total']} vs torch.cuda {total}")
        emit("python_vs_bench_resident", True, f"Python loop {py:.0f} samples/s, stoker bench "
             f"{bench['samples_per_s']:.0f} ({py / bench['samples_per_s']:.2f}x)",
             python_samples_per_s=py, bench_samples_per_s=bench["samples_per_s"])
        loader.close()
    except Exception as e:
        emit("python_resident", False, f"{type(e).__name__}: {e}")

    # Tensors the script holds (CPU), resident on cuda:0: every batch equals the host's samples.
    try:
        loader = stoker.Loader((images, labels), batch_size=1000, shuffle=True, device="cuda:0", num_workers=2)
        mode = loader.describe()["mode"]
        bad = batches = 0
        it = iter(loader)
        for x, y in it:
            idx = it.indices
            bad += int(not (x.is_cuda and torch.equal(x.cpu(), images[idx]) and torch.equal(y.cpu(), labels[idx])))
            batches += 1
        emit("python_tensors_on_gpu", bad == 0 and batches == len(loader) and mode == "resident",
             f"mode {mode}, {batches} batches, {bad} differing from the script's tensors")
        loader.close()
    except Exception as e:
        emit("python_tensors_on_gpu", False, f"{type(e).__name__}: {e}")

    # Tensors the script holds on cuda:0 as the dataset: the loader's device is theirs, it is
    # resident on them without a copy (allocated memory does not grow by the dataset), every batch
    # equals the host's samples; streaming and another device are refused by name.
    try:
        gx, gy = images.to("cuda:0"), labels.to("cuda:0")
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        loader = stoker.Loader((gx, gy), batch_size=1000, shuffle=True, num_workers=2)
        grew = torch.cuda.memory_allocated() - before
        info = loader.describe()
        bad = batches = 0
        it = iter(loader)
        for x, y in it:
            idx = it.indices
            bad += int(not (x.device == gx.device and torch.equal(x.cpu(), images[idx]) and torch.equal(y.cpu(), labels[idx])))
            batches += 1
        loader.close()
        refusals = []
        for kwargs, words in (({"loading_mode": "streaming"}, "resident there"), ({"device": "cpu"}, "the loader's device is cpu")):
            try:
                stoker.Loader((gx, gy), batch_size=1000, **kwargs)
                refusals.append(f"{kwargs}: accepted")
            except ValueError as e:
                if words not in str(e):
                    refusals.append(f"{kwargs}: {e}")
        dataset_bytes = gx.nbytes + gy.nbytes
        emit("python_cuda_tensors_dataset",
             bad == 0 and batches == len(loader) and info["mode"] == "resident" and info["device"] == "cuda:0"
             and grew < dataset_bytes // 2 and not refusals,
             f"device {info['device']}, mode {info['mode']}, {batches} batches, {bad} differing; allocated grew "
             f"{grew} bytes for a {dataset_bytes}-byte dataset; refusals: {refusals or 'as expected'}")
    except Exception as e:
        emit("python_cuda_tensors_dataset", False, f"{type(e).__name__}: {e}")

    if a.photos:
        images_on_gpu(a, stoker, torch)


def images_on_gpu(a, stoker, torch):
    """The train pipeline on an image folder into cuda:0 from Python, against `stoker bench` (the same
    engine without Python) and torchvision's ImageFolder + DataLoader (the peer), each the fastest
    of two epochs on as many workers; and the gap at the epoch boundary against a batch's time."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pipeline = "RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)"
    workers = max(1, (os.cpu_count() or 2) - 1)  # the consumer thread helps: workers + 1 threads
    spec = "imagefolder:" + a.photos
    try:
        loader = stoker.Loader(spec, batch_size=64, shuffle=True, drop_last=False, transforms=pipeline,
                               num_workers=workers, device="cuda:0")
        rates, gaps, intervals = [], [], []
        last = None
        for epoch in range(3):
            n, start = 0, time.perf_counter()
            first = True
            for x, y in loader:
                now = time.perf_counter()
                if last is not None:
                    (gaps if first else intervals).append(now - last)
                first = False
                last = now
                n += x.shape[0]
            torch.cuda.synchronize()
            last = time.perf_counter()
            rates.append(n / (last - start))
        shape = tuple(x.shape)
        loader.close()
        py = max(rates[1:])
        bench = last_json(subprocess.run(
            [os.path.join(a.build, "bin", "stoker"), "bench", "--dataset", spec, "--transforms", pipeline,
             "--batch-size", "64", "--epochs", "3", "--workers", str(workers), "--device", "cuda:0", "--quiet",
             "--json"], check=True, capture_output=True, text=True).stdout)
        peer = last_json(subprocess.run(
            [sys.executable, os.path.join(root, "tests", "bench", "torchvision_pipeline.py"), a.photos, "--pipeline",
             "train", "--workers", str(workers), "--epochs", "2", "--device", "cuda:0"],
            check=True, capture_output=True, text=True).stdout)
        intervals.sort()
        batch_s = intervals[len(intervals) // 2]
        # The boundary under a step that leaves the CPU to the loader (a GPU step: sleep twice a
        # batch's time): the next epoch's batches are made before it, so its first should not wait.
        sys.path.insert(0, os.path.join(root, "tests", "bench"))
        from python_loader_bench import boundary_with_step
        stepped = boundary_with_step(spec, 3, 2 * 64 / py, batch_size=64, shuffle=True, transforms=pipeline,
                                     num_workers=workers, device="cuda:0")
        emit("python_images_on_gpu", shape[1:] == (3, 224, 224),
             f"{workers} workers, batches {list(shape)}: Python loop {py:.0f} img/s, stoker bench "
             f"{bench['samples_per_s']:.0f} ({py / bench['samples_per_s']:.2f}x), torchvision "
             f"{peer['images_per_s']:.0f} ({py / peer['images_per_s']:.2f}x); epoch boundary "
             f"{max(gaps) * 1e3:.1f} ms against a median batch interval of {batch_s * 1e3:.2f} ms with nothing "
             f"else in the loop; under a {stepped['step_ms']} ms step the first batch waits "
             f"{stepped['first_batch_wait_ms']} ms (longest wait inside an epoch {stepped['longest_wait_inside_ms']} ms)",
             python_images_per_s=py, bench_images_per_s=bench["samples_per_s"],
             torchvision_images_per_s=peer["images_per_s"], boundary_gap_ms=max(gaps) * 1e3,
             batch_interval_ms=batch_s * 1e3, stepped_first_batch_wait_ms=stepped["first_batch_wait_ms"],
             stepped_longest_inside_ms=stepped["longest_wait_inside_ms"])
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"
        if isinstance(e, subprocess.CalledProcessError):
            detail += f" ({(e.stderr or '')[-400:]})"
        emit("python_images_on_gpu", False, detail)


if __name__ == "__main__":
    main()
