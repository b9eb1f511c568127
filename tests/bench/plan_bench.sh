#!/usr/bin/env bash
# Planning time for 10M samples x 1024 ranks: `stoker plan` (all ranks, the
# time it prints excludes process start-up) against PyTorch's
# DistributedSampler, which draws the whole permutation for every rank
# (one rank timed here, best of 3). Usage: bash tests/bench/plan_bench.sh [SAMPLES] [WORLD]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N=${1:-10000000}
W=${2:-1024}
STOKER=${STOKER:-build/bin/stoker}
PY=/usr/bin/python3
for i in 1 2 3; do
  "$STOKER" plan --samples "$N" --world-size "$W" --batch-size 32 | sed -n 's/.*(planned in \(.*\))/stoker torch policy, all ranks: \1/p'
done
weights=$("$PY" -c "print(','.join(str(1 + i % 3) for i in range($W)))")
for i in 1 2 3; do
  "$STOKER" plan --samples "$N" --world-size "$W" --batch-size 32 --weights "$weights" |
    sed -n 's/.*(planned in \(.*\))/stoker weighted, all ranks: \1/p'
done
"$PY" - "$N" "$W" <<'PY'
import sys, time
from torch.utils.data import DistributedSampler
n, world = int(sys.argv[1]), int(sys.argv[2])
best = 1e9
for _ in range(3):
    t = time.perf_counter()
    s = DistributedSampler(range(n), num_replicas=world, rank=0, seed=0)
    s.set_epoch(0)
    idx = list(s)
    best = min(best, time.perf_counter() - t)
print(f"torch DistributedSampler, one rank of {world}: {best * 1e3:.0f} ms; all ranks ~{best * world:.0f} s")
PY
