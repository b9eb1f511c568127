#!/usr/bin/env bash
# Reshard benchmark (issue: checkpoint reshard engine). Generates a ranks
# checkpoint of SIZE_MIB on 8 ranks and reshards it to 3 three ways, each
# followed by `sync`, on a warm page cache:
#   cp -r (the floor: moving the same bytes), stoker ckpt convert, and the
#   peers' approach in Python/torch (load all, cat, split, save).
# Each contender runs ROUNDS times (default 3), interleaved, and the median
# counts: the disk's write-back speed varies a lot between runs on a VM.
# Prints wall time, throughput, peak RSS (/usr/bin/time -v) and the ratios.
# usage: tests/bench/reshard_bench.sh [SIZE_MIB ...]   (default: 1024 4096)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/ckpt_bench_lib.sh"
work=${BENCH_DIR:-/tmp/stoker-reshard-bench}
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1024 4096)

printf "%-8s %-22s %9s %11s %12s\n" size method seconds MiB/s "peak RSS MiB"
for mib in "${sizes[@]}"; do
  rm -rf "$work"; mkdir -p "$work"
  /usr/bin/python3 "$here/make_ranks_checkpoint.py" "$work/src" --ranks 8 --size-mib "$mib"
  sync
  bytes=$(du -sb "$work/src" | cut -f1)
  cat "$work"/src/* > /dev/null  # warm the page cache for every contender alike
  cp_times=(); st_times=(); py_times=()
  for ((round = 0; round < ${ROUNDS:-3}; round++)); do
    read -r t rss_cp < <(measure cp cp -r "$work/src" "$work/cp"); cp_times+=("$t")
    rm -rf "$work/cp"; sync
    read -r t rss_st < <(measure stoker "$stoker" ckpt convert "$work/src" "$work/st" --to ranks:3); st_times+=("$t")
    "$stoker" ckpt verify "$work/src" "$work/st" >/dev/null 2>&1 || { echo "verify failed" >&2; exit 1; }
    rm -rf "$work/st"; sync
    if [ "$round" -eq 0 ] || [ -n "${PY_ROUNDS:-}" ]; then  # the slow reference once, unless asked
      read -r t rss_py < <(measure python /usr/bin/python3 "$here/reshard_ref.py" "$work/src" "$work/py" 3); py_times+=("$t")
      rm -rf "$work/py"; sync
    fi
  done
  report "$mib" "$bytes" "python torch ref"
done
rm -rf "$work"
