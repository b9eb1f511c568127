#!/usr/bin/env python3
"""Writes gpu-report.json and gpu-report.md from what `stoker.sh gpu-check` ran: the machine (GPU,
driver, torch, CUDA), each check of tests/cuda/cuda_check.cpp, its figures as ratios against
their peers (streaming H2D vs a pinned cudaMemcpyAsync loop, goal >= 90 %; resident gather vs a
device-to-device copy, goal >= 70 %), and the training-step feeding comparison (the warm epoch of
each feeder), and the image pipeline into the GPU (tests/cuda/image_feed.py: Stoker against
torchvision's DataLoader and a plain libjpeg-turbo decode loop on as many threads; figures, no pass
or fail, but a run that fails, a crash say, fails the report). Exits 1 when a check failed or none
ran, or a run of the image step failed."""
import argparse
import json
import os
import platform
import subprocess
import sys


def lines(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return out


def fmt(value, spec, suffix=""):
    return "" if value is None else format(value, spec) + suffix


def image_rows(records):
    """One row per (pipeline, workers) of Stoker's runs, with torchvision and the decode loop on as
    many workers/threads beside it."""
    loops = {r["threads"]: r["images_per_s"] for r in records if r.get("image_run") == "decode_loop"}
    tv = {(r["pipeline"], r["workers"]): r["images_per_s"] for r in records if r.get("image_run") == "torchvision"}
    rows = []
    for r in records:
        if r.get("image_run") != "stoker":
            continue
        row = {"pipeline": r["pipeline"], "workers": r["workers"], "stoker": r["images_per_s"],
               "stages_ms": r.get("stages_ms"), "verdict": r.get("verdict")}
        peer = tv.get((r["pipeline"], r["workers"]))
        if peer:
            row["torchvision"], row["vs_torchvision"] = peer, r["images_per_s"] / peer
        if loops.get(r["workers"]):
            row["decode_loop"] = loops[r["workers"]]
            row["vs_decode_loop"] = r["images_per_s"] / loops[r["workers"]]
        rows.append(row)
    return rows


def machine():
    m = {"host": platform.node(), "cpus": os.cpu_count()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        m["gpus"] = [dict(zip(["name", "driver", "memory"], [s.strip() for s in row.split(",")])) for row in q]
    except (OSError, subprocess.SubprocessError):
        m["gpus"] = []
    try:
        import torch
        m["torch"] = torch.__version__
        m["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--checks", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--images", default="")
    p.add_argument("--checks-not-run", action="store_true", help="STOKER_GPU_STEPS left the checks out")
    p.add_argument("--ctest-log", default="")
    p.add_argument("--seconds", type=float, default=0)
    a = p.parse_args()

    records = lines(a.checks)
    checks = [r for r in records if "check" in r]
    figures = {r["figure"]: r["value"] for r in records if "figure" in r}
    ratios = {}
    for name, ours, peer, goal in (("streaming_h2d_vs_pinned_memcpy", "streaming_h2d_bytes_per_s",
                                    "pinned_memcpy_h2d_bytes_per_s", 0.90),
                                   ("resident_gather_vs_device_copy", "resident_gather_bytes_per_s",
                                    "device_to_device_bytes_per_s", 0.70),
                                   # Beside the goals: the paths they replaced, and the kernel alone.
                                   ("streaming_staged_vs_pinned_memcpy", "streaming_staged_h2d_bytes_per_s",
                                    "pinned_memcpy_h2d_bytes_per_s", None),
                                   ("resident_through_workers_vs_device_copy", "resident_gather_workers_bytes_per_s",
                                    "device_to_device_bytes_per_s", None),
                                   ("resident_index_select_vs_device_copy", "resident_index_select_bytes_per_s",
                                    "device_to_device_bytes_per_s", None),
                                   ("gather_kernel_alone_vs_device_copy", "resident_kernel_alone_bytes_per_s",
                                    "device_to_device_bytes_per_s", None),
                                   # The image pipeline: u8 over PCIe and widened on the GPU, against float32.
                                   ("image_u8_device_vs_f32_host_normalize", "image_u8_device_normalize_images_per_s",
                                    "image_f32_host_normalize_images_per_s", None)):
        if ours in figures and peer in figures and figures[peer] > 0:
            r = figures[ours] / figures[peer]
            ratios[name] = {"ratio": r, "goal": goal, "met": goal is None or r >= goal}
    # Host cost of a resident batch (goal: at most 10 us), as "peer over ours" so the table reads alike.
    if figures.get("resident_host_us_per_batch_kernel", 0) > 0:
        us = figures["resident_host_us_per_batch_kernel"]
        ratios["resident_host_10us_over_us_per_batch"] = {"ratio": 10.0 / us, "goal": 1.0, "met": us <= 10.0}

    train = lines(a.train)
    warm = {}
    for r in train:  # the last epoch of each feeder: pools, workers and kernels warm
        if r.get("epoch", -1) >= warm.get(r["feeder"], {}).get("epoch", -1):
            warm[r["feeder"]] = r
    peers = [r for f, r in warm.items() if f.startswith("dataloader")]
    best_peer = max(peers, key=lambda r: r["samples_per_s"]) if peers else None
    feeding = []
    for f, r in sorted(warm.items()):
        row = {"feeder": f, "samples_per_s": r["samples_per_s"], "data_wait_share": r["data_wait_share"]}
        if best_peer and not f.startswith("dataloader"):
            row["vs_best_dataloader"] = r["samples_per_s"] / best_peer["samples_per_s"]
        feeding.append(row)

    image_records = lines(a.images) if a.images else []
    images = image_rows(image_records)
    image_errors = [r for r in image_records if "error" in r]

    ctest_passed = None
    if a.ctest_log and os.path.exists(a.ctest_log):
        text = open(a.ctest_log).read()
        ctest_passed = "100% tests passed" in text
    failed = [c["check"] for c in checks if not c["ok"]]
    ok = (bool(checks) or a.checks_not_run) and not failed and ctest_passed is not False and not image_errors
    report = {"machine": machine(), "seconds": a.seconds, "ok": ok, "ctest_cuda_passed": ctest_passed,
              "checks": checks, "figures": figures, "ratios": ratios, "training_feed": feeding,
              "image_pipeline": images, "image_errors": image_errors}
    with open(os.path.join(a.out, "gpu-report.json"), "w") as f:
        json.dump(report, f, indent=2)

    md = ["# Stoker GPU check", ""]
    mach = report["machine"]
    gpus = ", ".join(f"{g['name']} ({g['memory']}, driver {g['driver']})" for g in mach.get("gpus", []))
    md += [f"Machine: {gpus or 'no GPU listed'}; torch {mach.get('torch', '?')}, CUDA {mach.get('cuda', '?')}, "
           f"{mach['cpus']} CPUs. Whole run {a.seconds:.0f} s. Result: **{'pass' if ok else 'FAIL'}**.", ""]
    md += ["| check | result | detail |", "| --- | --- | --- |"]
    md += [f"| {c['check']} | {'skipped' if c.get('skipped') else 'ok' if c['ok'] else 'FAILED'} | {c['detail']} |"
           for c in checks]
    if not checks:
        md += ["| (none) | not run | STOKER_GPU_STEPS left the checks out |" if a.checks_not_run else
               "| (none) | FAILED | no check ran: see cuda-check.err |"]
    md += ["", "| figure | Stoker / peer | goal |", "| --- | ---: | ---: |"]
    md += [f"| {n} | {r['ratio'] * 100:.0f} % | "
           f"{'—' if r['goal'] is None else str(round(r['goal'] * 100)) + ' % ' + ('met' if r['met'] else 'MISSED')} |"
           for n, r in ratios.items()]
    md += ["", "| feeder (CNN on Fashion-MNIST, warm epoch) | samples/s | data wait | vs best DataLoader |",
           "| --- | ---: | ---: | ---: |"]
    md += [f"| {r['feeder']} | {r['samples_per_s']:.0f} | {r['data_wait_share'] * 100:.1f} % | "
           f"{r['vs_best_dataloader']:.2f}x |" if "vs_best_dataloader" in r else
           f"| {r['feeder']} | {r['samples_per_s']:.0f} | {r['data_wait_share'] * 100:.1f} % | |" for r in feeding]
    if images or image_errors:
        md += ["", "| image pipeline into the GPU | workers | Stoker img/s | torchvision img/s | vs torchvision | "
               "decode loop img/s | vs the loop | Stoker's verdict |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        md += [f"| {r['pipeline']} | {r['workers']} | {r['stoker']:.0f} | {fmt(r.get('torchvision'), '.0f')} | "
               f"{fmt(r.get('vs_torchvision'), '.2f', 'x')} | {fmt(r.get('decode_loop'), '.0f')} | "
               f"{fmt(r.get('vs_decode_loop'), '.2f', 'x')} | {r.get('verdict') or ''} |" for r in images]
        md += [f"| {r['image_run']} | | FAILED | | | | | {r['error'][-300:]} |" for r in image_errors]
    with open(os.path.join(a.out, "gpu-report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
