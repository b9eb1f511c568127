#!/usr/bin/env python3
"""The Python package on a GPU (run by packaging/gpu-check.sh; skips without CUDA): batches on cuda:0
consumed on a side stream equal the host's samples; a batch kept past the next ones stays intact
(reuse_buffers, streaming); the loader's memory figures are torch.cuda's; the loop's rate against
`stoker bench` on the same settings. One JSON line per check ({"check", "ok", "skipped", "detail"}),
the format of stoker_cuda_check, so gpu_report.py lists them with the others.

    tests/cuda/python_package.py --build BUILD --data FASHION_MNIST_DIR
"""
import argparse
import json
import os
import subprocess
import sys
import time


def emit(check, ok, detail, skipped=False, **figures):
    print(json.dumps({"check": check, "ok": bool(ok), "skipped": skipped, "detail": detail, **figures}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
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
    emit("python_import", True, f"stoker {stoker.__version__} built for torch {stoker._native.build_info()['torch']}, "
                                f"imported {torch.__version__}")
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
        bench = json.loads(subprocess.run([os.path.join(a.build, "bin", "stoker"), "bench", "--dataset", spec,
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


if __name__ == "__main__":
    main()
