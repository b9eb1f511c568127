#!/usr/bin/python3
"""Image pipeline benchmark (issue 14), every figure measured in this one run on this machine:

- Stoker (`stoker bench --dataset imagefolder:DIR --transforms ...`, float32 NCHW batches of 64)
  with 0 workers (one thread) and 1 and 2 workers (the consumer helps, so 2 threads on 2 cores);
- torchvision: ImageFolder + DataLoader, the same pipeline in PIL, num_workers 0, 1 and 2;
- Stoker on WebDataset shards of the same images (make_wds_shards.py), train pipeline;
- Stoker's train pipeline without the JPEG scan index (STOKER_JPEG_SCAN_INDEX_MB=0), 0 and 2 workers;
- the decode limit: a plain libjpeg-turbo loop decoding every file whole on 1 and 2 threads
  (build/bin/stoker_jpeg_decode_loop);
for the train pipeline (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize) and the
eval pipeline (Resize(256), CenterCrop(224), ToTensor, Normalize), on an ImageNet-like folder cut
from real photographs (tests/datasets/make_photo_folder.py: 10 classes x 500 JPEGs, ~500x375, q90).

    tests/bench/image_bench.py [--data DIR] [--epochs 2] [--repeats 3] [--json OUT]

This shared VM's speed drifts by 20-30 % from minute to minute: the C++ figures (Stoker, the decode
loop) are medians of --repeats runs taken in rotation; torchvision's slow runs are taken once.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
PIPELINES = {
    "train": "RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)",
    "eval": "Resize(256),CenterCrop(224),Normalize(imagenet)",
}


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1] if not out.strip().startswith("{\n") else out)


def median_run(runs):
    """The run with the median rate of several."""
    return sorted(runs, key=lambda r: r["images_per_s"])[len(runs) // 2]


def stoker(build, dataset, transforms, workers, epochs, scan_index=True):
    env = dict(os.environ, STOKER_JPEG_SCAN_INDEX_MB="1024" if scan_index else "0")
    doc = run_json([os.path.join(build, "bin", "stoker"), "bench", "--dataset", dataset, "--transforms", transforms,
                    "--batch-size", "64", "--epochs", str(epochs), "--workers", str(workers), "--json"], env)
    dev = doc["per_device"][0]
    return {"images_per_s": doc["samples_per_s"], "stages_ms": dev["stages_ms"], "verdict": dev["stage_verdict"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "bench-data", "photos"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_photo_folder.py"), a.data], check=True)
    loop = os.path.join(a.build, "bin", "stoker_jpeg_decode_loop")
    # WebDataset shards of the same images (sequential reads), for the train pipeline.
    shards = a.data.rstrip("/") + "-wds"
    if not os.path.isdir(shards):
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_wds_shards.py"), a.data, shards, "--per-shard", "500"],
                       check=True, stdout=subprocess.DEVNULL)
    count = len([f for f in os.listdir(shards) if f.endswith(".tar")])
    wds_spec = f"wds:{shards}/train-{{000000..{count - 1:06d}}}.tar"
    res = {"data": a.data, "repeats": a.repeats, "decode_loop": {}, "stoker": {}, "torchvision": {}, "wds": {}}
    runs = {}
    for _ in range(a.repeats):  # in rotation, so a slow minute hits every configuration alike
        for t in (1, 2):
            runs.setdefault(("loop", t), []).append({"images_per_s": run_json([loop, a.data, "--threads", str(t)])["images_per_s"]})
        for name, transforms in PIPELINES.items():
            for w in (0, 1, 2):
                runs.setdefault((name, w), []).append(stoker(a.build, "imagefolder:" + a.data, transforms, w, a.epochs))
        for w in (1, 2):
            runs.setdefault(("wds", w), []).append(stoker(a.build, wds_spec, PIPELINES["train"], w, a.epochs))
        for w in (0, 2):  # what the JPEG scan index brings: the same runs without it
            runs.setdefault(("train-plain", w), []).append(
                stoker(a.build, "imagefolder:" + a.data, PIPELINES["train"], w, a.epochs, scan_index=False))
    for t in (1, 2):
        res["decode_loop"][t] = median_run(runs[("loop", t)])["images_per_s"]
    res["train_without_scan_index"] = {w: median_run(runs[("train-plain", w)])["images_per_s"] for w in (0, 2)}
    for w in (1, 2):
        res["wds"][w] = median_run(runs[("wds", w)])["images_per_s"]
    for name in PIPELINES:
        res["stoker"][name], res["torchvision"][name] = {}, {}
        for w in (0, 1, 2):
            res["stoker"][name][w] = median_run(runs[(name, w)])
            res["torchvision"][name][w] = run_json([PY, os.path.join(HERE, "torchvision_pipeline.py"), a.data, "--pipeline", name,
                                                    "--workers", str(w), "--epochs", str(a.epochs)])["images_per_s"]
    limit = res["decode_loop"][2]
    print(f"medians of {a.repeats} runs for Stoker and the decode loop")
    print(f"images: {a.data}; decode limit (libjpeg-turbo, whole images): {res['decode_loop'][1]:.0f} img/s on 1 thread, "
          f"{limit:.0f} on 2")
    print(f"{'pipeline':8} {'workers':>7} {'stoker img/s':>13} {'torchvision':>12} {'ratio':>6}   stoker stages (ms/batch)")
    for name in PIPELINES:
        for w in (0, 1, 2):
            s, t = res["stoker"][name][w], res["torchvision"][name][w]
            stages = " ".join(f"{k} {v:.1f}" for k, v in s["stages_ms"].items())
            print(f"{name:8} {w:>7} {s['images_per_s']:>13.0f} {t:>12.0f} {s['images_per_s'] / t:>5.1f}x   {stages}")
        best_s = max(v["images_per_s"] for v in res["stoker"][name].values())
        best_t = max(res["torchvision"][name].values())
        scale = res["stoker"][name][2]["images_per_s"] / res["stoker"][name][0]["images_per_s"]
        print(f"{name}: best Stoker {best_s:.0f} img/s = {best_s / best_t:.2f}x best torchvision ({best_t:.0f}), "
              f"{best_s / limit:.2f}x the decode limit; 1 -> 2 cores {scale:.2f}x; {res['stoker'][name][2]['verdict']}")
    plain = res["train_without_scan_index"]
    print(f"train without the JPEG scan index (STOKER_JPEG_SCAN_INDEX_MB=0): {plain[0]:.0f} img/s on one thread "
          f"= {plain[0] / res['decode_loop'][1]:.2f}x the loop's 1 thread, {plain[2]:.0f} with 2 workers = {plain[2] / limit:.2f}x; "
          f"with it {res['stoker']['train'][0]['images_per_s'] / plain[0]:.2f}x and "
          f"{res['stoker']['train'][2]['images_per_s'] / plain[2]:.2f}x faster")
    best_folder = max(v["images_per_s"] for v in res["stoker"]["train"].values())
    best_wds = max(res["wds"].values())
    print(f"wds (train, same images in {count} shards): {res['wds'][1]:.0f} img/s with 1 worker, {res['wds'][2]:.0f} with 2 "
          f"= {best_wds / best_folder:.2f}x the image folder's best")
    res["runs"] = {f"{k[0]}/{k[1]}": [round(r["images_per_s"]) for r in v] for k, v in runs.items()}  # every repeat
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
