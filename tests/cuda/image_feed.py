#!/usr/bin/env python3
"""The image pipeline (issue 14) feeding a GPU, for `stoker.sh gpu-check`: every figure from this one
run on this machine, one JSON line each.

- Stoker: `stoker bench --dataset imagefolder:DIR --transforms ... --device cuda:0`, float32 NCHW
  batches of 64 decoded on --workers threads and copied to the GPU;
- torchvision: ImageFolder + DataLoader (PIL), the same pipeline, pin_memory=True, each batch copied
  to the GPU (tests/bench/torchvision_pipeline.py --device);
- the decode limit: a plain libjpeg-turbo loop decoding every file whole on as many threads
  (stoker_jpeg_decode_loop);
for the train pipeline (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize) and the
eval pipeline (Resize(256), CenterCrop(224), ToTensor, Normalize).

    image_feed.py --build BUILD --data PHOTOS [--device cuda:0] [--workers 8,15,16] [--epochs 2]
                  [--lib-path DIRS]

--lib-path is prepended to LD_LIBRARY_PATH for Stoker's programs only (the carried Debian
libraries of gpu-check); Python runs keep this process's own.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from image_bench import PIPELINES  # noqa: E402  the same transforms as the 2-core benchmark


def last_json(cmd, env=None, timeout=600):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    out = proc.stdout.strip()
    return json.loads(out if out.startswith("{\n") else out.splitlines()[-1])


def emit(record):
    print(json.dumps(record), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--workers", default="", help="comma-separated worker counts (default: half the cores, all but one, all)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lib-path", default="")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    # Half the cores, all but one (gpu_optimized's choice: the consumer's thread helps), all.
    workers = ([int(w) for w in a.workers.split(",")] if a.workers
               else sorted({max(1, cores // 2), max(1, cores - 1), cores}))
    stoker_env = dict(os.environ)
    if a.lib_path:
        stoker_env["LD_LIBRARY_PATH"] = a.lib_path + (":" + os.environ["LD_LIBRARY_PATH"]
                                                       if os.environ.get("LD_LIBRARY_PATH") else "")
    failed = 0

    def attempt(what, fn):
        nonlocal failed
        try:
            fn()
        except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as e:
            failed += 1
            emit({"image_run": what, "error": str(e)[-2000:]})
            print(f"image_feed: {what}: {e}", file=sys.stderr)

    def loop(threads):
        doc = last_json([os.path.join(a.build, "bin", "stoker_jpeg_decode_loop"), a.data, "--threads", str(threads)],
                        stoker_env)
        emit({"image_run": "decode_loop", "threads": threads, "images_per_s": doc["images_per_s"]})

    def stoker(pipeline, w):
        doc = last_json([os.path.join(a.build, "bin", "stoker"), "bench", "--dataset", "imagefolder:" + a.data,
                         "--transforms", PIPELINES[pipeline], "--batch-size", "64", "--epochs", str(a.epochs),
                         "--workers", str(w), "--device", a.device, "--quiet", "--json"], stoker_env)
        dev = doc["per_device"][0]
        emit({"image_run": "stoker", "pipeline": pipeline, "workers": w, "device": a.device,
              "images_per_s": doc["samples_per_s"], "stages_ms": dev.get("stages_ms"),
              "verdict": dev.get("stage_verdict")})

    def torchvision(pipeline, w):
        doc = last_json([sys.executable, os.path.join(ROOT, "tests", "bench", "torchvision_pipeline.py"), a.data,
                         "--pipeline", pipeline, "--workers", str(w), "--epochs", str(a.epochs),
                         "--device", a.device])
        emit({"image_run": "torchvision", "pipeline": pipeline, "workers": w, "device": a.device,
              "images_per_s": doc["images_per_s"], "torch": doc.get("torch")})

    for w in workers:
        attempt(f"decode loop, {w} threads", lambda: loop(w))
    for pipeline in PIPELINES:
        for w in workers:
            attempt(f"stoker {pipeline}, {w} workers", lambda: stoker(pipeline, w))
            # torchvision's slow runs dominate the step's time: not at all-but-one when all is run too.
            if not (w == cores - 1 and cores in workers):
                attempt(f"torchvision {pipeline}, {w} workers", lambda: torchvision(pipeline, w))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
