#!/usr/bin/python3
"""Token stream benchmark (issue 14), measured in one run: batches of 64 x 1024 tokens (int64 input
and target) from a nanoGPT token file, by

- nanoGPT's get_batch (numpy memmap re-opened per batch, random offsets, torch.stack of
  astype(int64) slices: the function from nanoGPT's train.py, on the CPU), single-threaded as in
  its training loop;
- Stoker: `stoker bench --dataset tokens:FILE,ctx=1024 --batch-size 64` (random windows), with 0
  workers (one thread) and with the gpu_optimized defaults (2 cores);

at two file sizes (default 1 GiB and 4 GiB, cut from tests/datasets/make_token_files.py's corpus),
with each side's peak anonymous memory (RssAnon, sampled every 20 ms: mapped file pages are page
cache, not the program's), to show memory flat in the file size.

    tests/bench/token_bench.py [--sizes 1GiB,4GiB] [--seconds 8] [--data DIR] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peak_memory import peak_anon  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"

NANOGPT = r'''
import sys, time, json, numpy as np, torch
path, seconds = sys.argv[1], float(sys.argv[2])
block_size, batch_size = 1024, 64
def get_batch():
    # nanoGPT's train.py: "we recreate np.memmap every batch to avoid a memory leak"
    data = np.memmap(path, dtype=np.uint16, mode='r')
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    return x, y
torch.manual_seed(0)
get_batch()
n, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    get_batch(); n += 1
print(json.dumps({"batches_per_s": n / (time.perf_counter() - start)}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1GiB,4GiB")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "bench-data"))
    ap.add_argument("--json")
    a = ap.parse_args()
    stoker = os.path.join(a.build, "bin", "stoker")
    results = []
    for size in a.sizes.split(","):
        d = os.path.join(a.data, "tokens-" + size)
        path = os.path.join(d, "tokens.bin")
        if not os.path.exists(path):
            subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_token_files.py"), d, "--tokens-bytes", size],
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for both sides
        row = {"size": size, "bytes": os.path.getsize(path)}
        out, row["nanogpt_anon"] = peak_anon([PY, "-c", NANOGPT, path, str(a.seconds)])
        row["nanogpt"] = json.loads(out)["batches_per_s"]
        for label, extra in (("stoker_1thread", ["--workers", "0"]), ("stoker", [])):
            # One epoch is 8 k batches per GiB: cap it with the sampler's num_samples.
            opts = os.path.join(d, "opts.json")
            with open(opts, "w") as f:
                json.dump({"sampler_type": "random_with_replacement", "num_samples": 64 * 4000, "batch_size": 64,
                           "num_workers": 1, "prefetch": 8}, f)
            out, anon = peak_anon([stoker, "bench", "--dataset", f"tokens:{path},ctx=1024", "--options", opts, "--epochs", "2",
                                   "--json"] + extra)
            doc = json.loads(out)
            row[label] = doc["samples_per_s"] / 64
            row[label + "_anon"] = anon
        results.append(row)
    print(f"{'file':>6} {'nanoGPT get_batch':>18} {'Stoker 1 thread':>16} {'Stoker 2 cores':>15} {'ratio':>6}   peak anon memory (nanoGPT / Stoker)")
    for r in results:
        print(f"{r['size']:>6} {r['nanogpt']:>14.1f} b/s {r['stoker_1thread']:>12.1f} b/s {r['stoker']:>11.1f} b/s "
              f"{r['stoker'] / r['nanogpt']:>5.1f}x   {r['nanogpt_anon'] / 2**20:.0f} MiB / {r['stoker_anon'] / 2**20:.0f} MiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
