#!/usr/bin/env bash
# Loader benchmark (issue: loader engine). Runs, on this machine and in one
# go, the C++ side (Stoker's loader, a libtorch randperm + index_select loop,
# memcpy, thread scaling: build/bin/stoker_loader_bench) and the Python peers
# (PyTorch's DataLoader with 0 and 2 workers, the same loop in Python:
# loader_peers.py with Debian's python3-torch), then prints the ratios.
# usage: ROUNDS=5 REPEATS=3 tests/bench/loader_bench.sh [FASHION_MNIST_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bench=${LOADER_BENCH:-$root/build/bin/stoker_loader_bench}
dir=${1:-/usr/share/datasets/fashion-mnist}
[ -x "$bench" ] || { echo "build first: bash packaging/stoker.sh build" >&2; exit 2; }
# The two sides alternate REPEATS times (default 3) and every figure is the
# median over repeats: single runs on a shared VM drift too much to compare.
repeats=${REPEATS:-3}
cpp=(); py=()
for _ in $(seq "$repeats"); do
  cpp+=("$("$bench" "fashion-mnist:$dir")")
  py+=("$(/usr/bin/python3 "$here/loader_peers.py" "$dir")")
done
/usr/bin/python3 - "$repeats" "${cpp[@]}" "${py[@]}" <<'PY'
import json, statistics, sys
n = int(sys.argv[1])
docs_c = [json.loads(x) for x in sys.argv[2:2 + n]]
docs_p = [json.loads(x) for x in sys.argv[2 + n:2 + 2 * n]]

def med(docs):  # the median of every number, keeping the structure
    first = docs[0]
    if isinstance(first, dict):
        return {k: med([d[k] for d in docs]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return statistics.median(docs)
    return first

c, p = med(docs_c), med(docs_p)
print(f"medians of {n} alternating repeats")
f, g, s = c["fashion"], c["gather_64k"], c["scaling_200us"]
st = f["stoker_samples_per_s"]
rows = [
    ("Stoker loader (gpu_optimized, batch 256)", st, ""),
    ("PyTorch DataLoader, num_workers=0", p["dataloader_workers_0_samples_per_s"], ""),
    ("PyTorch DataLoader, num_workers=2", p["dataloader_workers_2_samples_per_s"], ""),
    ("randperm + index_select loop (Python)", p["index_select_loop_samples_per_s"], ""),
    ("randperm + index_select loop (C++)", f["torch_loop_cpp_samples_per_s"], ""),
]
print("Fashion-MNIST, 60000 samples, batch 256, shuffled, float32 (samples/s, median of rounds):")
for name, v, _ in rows:
    print(f"  {name:44s} {v:12,.0f}   Stoker = {st / v:5.2f}x")
print("  Stoker variants:", ", ".join(f"{k}: {v:,.0f}" for k, v in f["stoker_variants"].items()))
print(f"vs DataLoader (best of 0 and 2 workers): {st / p['dataloader_best_samples_per_s']:.1f}x (goal >= 6x)")
print(f"vs index_select loop: Python {st / p['index_select_loop_samples_per_s']:.2f}x, C++ (interleaved in one process) {f['ratio_vs_torch_loop_cpp']:.2f}x (goal >= 1.2x)")
print(f"64 KiB gather: {g['stoker_bytes_per_s'] / 2**30:.2f} GiB/s = {g['fraction_of_memcpy_1_thread']:.0%} of 1-thread memcpy "
      f"({g['memcpy_1_thread_bytes_per_s'] / 2**30:.2f} GiB/s), {g['fraction_of_memcpy_all_threads']:.0%} of all-thread memcpy "
      f"({g['memcpy_all_threads_bytes_per_s'] / 2**30:.2f} GiB/s) (goal >= 60%)")
print(f"200 us/sample: 1 thread {s['threads_1_samples_per_s']:,.0f}/s, 2 threads {s['threads_2_samples_per_s']:,.0f}/s "
      f"= {s['speedup']:.2f}x (ideal 2x on 2 cores, {s['ideal_samples_per_s_per_thread']:,.0f}/s per thread); "
      f"2 workers + consumer {s['workers_2_samples_per_s']:,.0f}/s")
print(f"(PyTorch {p['torch_version']})")
PY
