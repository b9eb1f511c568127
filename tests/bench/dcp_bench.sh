#!/usr/bin/env bash
# DCP -> HF safetensors benchmark (issue 17). A real PyTorch Distributed Checkpoint of SIZE_MIB,
# written by a 2-process Gloo job of Debian's torch 1.13 (every parameter of a transformer-like
# model dim-0 sharded, FSDP's layout), is converted to HF shards of at most 1 GB three ways, each
# followed by `sync`, on a warm page cache:
#   cp -r (the floor: moving the same bytes), stoker ckpt convert --to hf:1GB, and the peers' way
#   in Python (tests/bench/dcp_to_hf_ref.py: what dcp_to_torch_save does -- load everything with
#   DCP's reader -- then write the shards).
# Each contender runs ROUNDS times (default 3; the slow reference once unless PY_ROUNDS is set),
# interleaved; the median counts. Prints wall time, throughput, peak RSS and the ratios; checks
# Stoker's output with `stoker ckpt verify` against the DCP source and the reference's output.
# usage: tests/bench/dcp_bench.sh [SIZE_MIB ...]   (default: 1024 4096)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/ckpt_bench_lib.sh"
work=${BENCH_DIR:-/tmp/stoker-dcp-bench}
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1024 4096)

printf "%-8s %-22s %9s %11s %12s\n" size method seconds MiB/s "peak RSS MiB"
for mib in "${sizes[@]}"; do
  rm -rf "$work"; mkdir -p "$work"
  /usr/bin/python3 "$root/tests/ckpt/dcp_fixtures.py" model "$work/src" "$mib"
  sync
  bytes=$(du -sb "$work/src" | cut -f1)
  cat "$work"/src/* "$work"/src/.metadata > /dev/null  # warm the page cache for every contender alike
  cp_times=(); st_times=(); py_times=()
  for ((round = 0; round < ${ROUNDS:-3}; round++)); do
    read -r t rss_cp < <(measure cp cp -r "$work/src" "$work/cp"); cp_times+=("$t")
    rm -rf "$work/cp"; sync
    read -r t rss_st < <(measure stoker "$stoker" ckpt convert "$work/src" "$work/st" --to hf:1GB); st_times+=("$t")
    if [ "$round" -eq 0 ]; then
      "$stoker" ckpt verify "$work/src" "$work/st" >/dev/null 2>&1 || { echo "verify against the source failed" >&2; exit 1; }
    fi
    if [ "$round" -eq 0 ] || [ -n "${PY_ROUNDS:-}" ]; then  # the slow reference once, unless asked
      read -r t rss_py < <(measure python /usr/bin/python3 "$here/dcp_to_hf_ref.py" "$work/src" "$work/py" 1000000000); py_times+=("$t")
      "$stoker" ckpt verify "$work/py" "$work/st" >/dev/null 2>&1 || { echo "the reference and Stoker disagree" >&2; exit 1; }
      rm -rf "$work/py"; sync
    fi
    rm -rf "$work/st"; sync
  done
  report "$mib" "$bytes" "python dcp ref"
done
rm -rf "$work"
