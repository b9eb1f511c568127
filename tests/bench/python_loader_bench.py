#!/usr/bin/python3
"""The Python package against its peers, in one run (issue 37's figures):

- fashion-mnist (resident, batch 256): `for x, y in stoker.Loader(...)` with nothing else in the loop
  against `stoker bench` on the same settings (what the binding costs) and against DataLoader over
  a TensorDataset (0 and 2 workers, the best);
- tokens (nanoGPT's uint16 file, ctx 1024, batch 64): stoker.Loader against nanoGPT's get_batch;
- the image train pipeline (RandomResizedCrop(224), flip, Normalize; a photo folder): stoker.Loader
  against `stoker bench` and torchvision's ImageFolder + DataLoader (0/1/2 workers, the best);
- a training loop whose step costs 5 ms (busy CPU work): the data-wait share of the step time,
  from the loader's own summary;
- batches of 4 (the per-batch cost of the Python path): the extension stoker._batches against the
  ctypes path and `stoker bench`, taking turns;
- the gap at an epoch boundary: the longest wait for the first batch of an epoch, against the
  median wait inside it; with nothing else in the loop (the loader is the bottleneck: the first
  batch waits like any other) and, for images, with a step that leaves the CPU to the loader
  (time.sleep of twice a batch's time, as a GPU step does), where the next epoch's batches are
  made before the boundary and the first one should not wait.

Each Stoker figure is the median of the epochs after the first, each counted from its first ask for a
batch as `stoker bench` counts; `whole_run` figures take every epoch after the open with its start
(the CLI's run_seconds less open_seconds). Prints one JSON document.

    tests/bench/python_loader_bench.py --build build [--photos DIR] [--tokens FILE] [--epochs 8] [--fashion-epochs 60] [--rounds 6]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRAIN = "RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)"


def stoker_python(spec, epochs, **kw):
    """Each epoch's rate counted from the first ask for a batch, as `stoker bench` counts its epochs
    (samples_per_s: the median after the first), and the whole run after the open: every epoch with
    its start, as the CLI's run_seconds less open_seconds."""
    import stoker
    loader = stoker.Loader(spec, **kw)
    rates, boundary, inside, total = [], [], [], 0
    run_start = time.perf_counter()
    for e in range(epochs):
        n, last = 0, time.perf_counter()
        it = iter(loader)
        start = time.perf_counter()
        for i, batch in enumerate(it):
            now = time.perf_counter()
            (boundary if i == 0 else inside).append(now - last) if e > 0 else None
            last = now
            n += batch[0].shape[0]
        rates.append(n / (time.perf_counter() - start))
        total += n
    run_rate = total / (time.perf_counter() - run_start)
    info = loader.describe()
    loader.close()
    return {"samples_per_s": statistics.median(rates[1:]) if len(rates) > 1 else rates[0],
            "whole_run_samples_per_s": run_rate,
            "epochs": [round(r) for r in rates], "mode": info["mode"],
            "first_batch_wait_ms": round(1e3 * max(boundary), 3) if boundary else None,
            "median_batch_wait_ms": round(1e3 * statistics.median(inside), 3) if inside else None}


def boundary_with_step(spec, epochs, step_s, **kw):
    """Waits for the first batch of each epoch after the first, and the longest wait inside one,
    under a step of step_s seconds that leaves the CPU to the loader."""
    import stoker
    loader = stoker.Loader(spec, **kw)
    first, inside = [], []
    for e in range(epochs):
        it = iter(loader)
        i = 0
        while True:
            asked = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                break
            if e > 0:
                (first if i == 0 else inside).append(time.perf_counter() - asked)
            i += 1
            time.sleep(step_s)
    loader.close()
    return {"step_ms": round(1e3 * step_s, 1), "first_batch_wait_ms": round(1e3 * max(first), 3),
            "longest_wait_inside_ms": round(1e3 * max(inside), 3)}


def stoker_bench(build, spec, epochs, batch, workers, transforms=None):
    cmd = [os.path.join(build, "bin", "stoker"), "bench", "--dataset", spec, "--batch-size", str(batch),
           "--epochs", str(epochs), "--workers", str(workers), "--json"]
    if transforms:
        cmd += ["--transforms", transforms]
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    epochs_ = doc["per_device"][0]["epochs"]
    return {"samples_per_s": statistics.median(e["samples_per_s"] for e in epochs_[1:]) if len(epochs_) > 1
            else doc["samples_per_s"],
            "whole_run_samples_per_s": sum(e["samples"] for e in epochs_) / (doc["run_seconds"] - doc["open_seconds"]),
            "mode": doc["mode"]}


def dataloader_fashion(epochs, workers):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import torch
    from common import fashion
    images, labels = fashion("train")
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=256, shuffle=True,
                                     num_workers=workers, persistent_workers=workers > 0)
    rates = []
    for _ in range(epochs):
        n, start = 0, time.perf_counter()
        for x, y in dl:
            n += x.shape[0]
        rates.append(n / (time.perf_counter() - start))
    return max(rates[1:])


def nanogpt_get_batch(path, seconds):
    import numpy as np
    import torch
    block, batch = 1024, 64

    def get_batch():  # nanoGPT's train.py, CPU
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([torch.from_numpy((data[i:i + block]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block]).astype(np.int64)) for i in ix])
        return x, y
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        x, y = get_batch()
        n += x.shape[0]
    return n / (time.perf_counter() - start)


def torchvision_best(photos, workers_list):
    best = 0.0
    for w in workers_list:
        out = subprocess.run([sys.executable, os.path.join(HERE, "torchvision_pipeline.py"), photos, "--pipeline", "train",
                              "--workers", str(w), "--epochs", "2"], check=True, capture_output=True, text=True).stdout
        best = max(best, json.loads(out.strip().splitlines()[-1])["images_per_s"])
    return best


def step_loop(spec, step_ms, **kw):
    """One epoch whose steps are step_ms of busy work, watched by the loader's own summary and by
    the Python probe (python/stoker_probe) around the loop."""
    import tempfile
    import stoker
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import stoker_probe
    loader = stoker.Loader(spec, **kw)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.jsonl")
        for batch in stoker_probe.watch(loader, publish=f"file:{path}", name="bench"):
            end = time.perf_counter() + step_ms / 1e3
            while time.perf_counter() < end:
                pass
        stoker_probe.shutdown()
        ends = [json.loads(line) for line in open(path) if '"epoch_end": true' in line or '"epoch_end":true' in line]
    last = loader.describe()["last_epoch"]
    loader.close()
    out = {"data_wait_share": last["data_wait_s"] / last["seconds"], "batches": last["batches"]}
    if ends:
        e = ends[-1]
        out["probe_data_wait_share"] = e["data_wait_ms"] / (e["data_wait_ms"] + e["step_ms"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--photos")
    ap.add_argument("--tokens")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--fashion-epochs", type=int, default=60)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    out = {"machine": f"{os.cpu_count()} cores"}

    # This VM's rate drifts by tens of percent from second to second: the Python loop and the CLI
    # take turns, a.rounds times each, and the medians are compared.
    # An epoch of Fashion-MNIST takes ~10 ms here: a.fashion_epochs of them per turn.
    pys, clis = [], []
    for r in range(a.rounds):
        turn = [lambda: pys.append(stoker_python("fashion-mnist", a.fashion_epochs, batch_size=256, shuffle=True,
                                                 num_workers=a.workers, drop_last=True)),
                lambda: clis.append(stoker_bench(a.build, "fashion-mnist", a.fashion_epochs, 256, a.workers))]
        for run in (turn if r % 2 == 0 else turn[::-1]):
            run()
    py_rate = statistics.median(p["samples_per_s"] for p in pys)
    cli_rate = statistics.median(c["samples_per_s"] for c in clis)
    py_run = statistics.median(p["whole_run_samples_per_s"] for p in pys)
    cli_run = statistics.median(c["whole_run_samples_per_s"] for c in clis)
    for p in pys:
        del p["epochs"]
    dl = max(dataloader_fashion(3, 0), dataloader_fashion(3, 2))
    out["fashion_mnist"] = {"python": pys, "stoker_bench": clis, "python_median": py_rate, "bench_median": cli_rate,
                            "dataloader_best": dl, "python_vs_bench": py_rate / cli_rate,
                            "python_vs_bench_whole_run": py_run / cli_run,
                            "python_vs_dataloader": py_rate / dl}
    # Batches of 4: the per-batch cost of the Python path shows (the core makes one in ~10 us).
    # The extension stoker._batches against the ctypes path and the CLI, taking turns.
    import stoker.loader
    fast = stoker.loader._batches_next
    small = {"extension": [], "ctypes": [], "stoker_bench": []}

    def python_small(path):
        stoker.loader._batches_next = fast if path == "extension" else None
        try:
            small[path].append(stoker_python("fashion-mnist", 4, batch_size=4, shuffle=True,
                                             num_workers=a.workers)["samples_per_s"] / 4)
        finally:
            stoker.loader._batches_next = fast
    for r in range(a.rounds):
        turn = [lambda: python_small("extension") if fast else None, lambda: python_small("ctypes"),
                lambda: small["stoker_bench"].append(stoker_bench(a.build, "fashion-mnist", 4, 4, a.workers)["samples_per_s"] / 4)]
        for run in (turn if r % 2 == 0 else turn[::-1]):
            run()
    out["fashion_mnist_batch_4"] = {"batches_per_s_medians": {k: round(statistics.median(v)) for k, v in small.items() if v},
                                    "runs": {k: [round(x) for x in v] for k, v in small.items()}}
    if fast:
        out["fashion_mnist_batch_4"]["extension_vs_ctypes"] = statistics.median(small["extension"]) / statistics.median(small["ctypes"])
        out["fashion_mnist_batch_4"]["extension_vs_bench"] = statistics.median(small["extension"]) / statistics.median(small["stoker_bench"])
    out["fashion_mnist_batch_4"]["ctypes_vs_bench"] = statistics.median(small["ctypes"]) / statistics.median(small["stoker_bench"])
    if a.tokens:
        spec = f"tokens:{a.tokens},dtype=u16,ctx=1024"
        py = stoker_python(spec, 2, batch_size=64, shuffle=True, num_workers=a.workers, drop_last=True)
        ref = nanogpt_get_batch(a.tokens, 6)
        out["tokens"] = {"python": py, "nanogpt_get_batch": ref, "python_vs_nanogpt": py["samples_per_s"] / ref}
    if a.photos:
        spec = f"imagefolder:{a.photos}"
        # Epochs enough for the JPEG scan index to be built (the second epoch) and used.
        py = stoker_python(spec, a.epochs, batch_size=64, shuffle=True, num_workers=a.workers, drop_last=True,
                           transforms=TRAIN)
        cli = stoker_bench(a.build, spec, a.epochs, 64, a.workers, TRAIN)
        tv = torchvision_best(a.photos, [0, 1, 2])
        out["images_train"] = {"python": py, "stoker_bench": cli, "torchvision_best": tv,
                               "python_vs_bench": py["samples_per_s"] / cli["samples_per_s"],
                               "python_vs_torchvision": py["samples_per_s"] / tv,
                               "boundary_with_step": boundary_with_step(
                                   spec, 3, 2 * 64 / py["samples_per_s"], batch_size=64, shuffle=True,
                                   num_workers=a.workers, drop_last=True, transforms=TRAIN)}
    out["step_5ms"] = step_loop("fashion-mnist", 5, batch_size=256, shuffle=True, num_workers=a.workers)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
