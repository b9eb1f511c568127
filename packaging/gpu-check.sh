#!/usr/bin/env bash
# packaging/gpu-check.sh OUTDIR -- the one command that proves the CUDA path on a machine with an
# NVIDIA GPU, CUDA and PyTorch (no Qt, no network needed); `bash packaging/stoker.sh gpu-check`.
#
#  1. builds with -DSTOKER_GUI=OFF -DSTOKER_TESTS=OFF against PyTorch's own CUDA libtorch
#     (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') in build-gpu/;
#  2. runs the CUDA checks (CTest label "cuda": tests/cuda/cuda_check.cpp) with their figures;
#  3. trains the same CNN on Fashion-MNIST fed by Stoker (resident, streaming) and by PyTorch's
#     DataLoader(pin_memory=True, num_workers=k) (tests/bench/train_feed_peer.py);
#  4. writes OUTDIR/gpu-report.json and OUTDIR/gpu-report.md (tests/cuda/gpu_report.py) and exits
#     non-zero when a check failed.
# Without a GPU it says so in one line and exits 2.
#
# Build dependencies other than PyTorch (JSON, CLI, hashing, image and archive libraries) come from
# the system; on a machine without them or a package manager, STOKER_GPU_DEPS=DIR names a folder of
# Debian packages (`bash packaging/stoker.sh gpu-deps DIR` downloads them where apt works) that is
# unpacked beside the build. STOKER_FASHION_MNIST=DIR points at the dataset when it is not in
# /usr/share/datasets/fashion-mnist (the dataset-fashion-mnist package is among the gpu-deps).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-}"
log() { printf 'stoker gpu-check: %s\n' "$*" >&2; }

if [[ -z "$OUT" ]]; then
  echo "usage: bash packaging/stoker.sh gpu-check OUTDIR" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "stoker gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to check" >&2
  exit 2
fi
PY="${STOKER_PYTHON:-python3}"
if ! TORCH_PREFIX=$("$PY" -c 'import torch; assert torch.cuda.is_available(); print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  echo "stoker gpu-check: $PY has no PyTorch that sees the GPU (import torch; torch.cuda.is_available())" >&2
  exit 2
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${STOKER_GPU_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="$(nproc)"
START=$SECONDS
PREFIXES="$TORCH_PREFIX"
CMAKE_EXTRA=()

# Carried Debian packages: unpacked into BUILD/deps, their pkg-config files pointed there.
if [[ -n "${STOKER_GPU_DEPS:-}" ]]; then
  DEPS="$BUILD/deps"
  if [[ ! -f "$DEPS/.unpacked" ]]; then
    log "unpacking $(ls "$STOKER_GPU_DEPS"/*.deb | wc -l) carried packages into $DEPS"
    mkdir -p "$DEPS"
    for deb in "$STOKER_GPU_DEPS"/*.deb; do dpkg-deb -x "$deb" "$DEPS" 2>/dev/null || (cd "$DEPS" && ar p "$deb" data.tar.xz | tar xJ); done
    find "$DEPS" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$DEPS/usr|" {} +
    touch "$DEPS/.unpacked"
  fi
  MULTIARCH="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
  PREFIXES="$PREFIXES;$DEPS/usr"
  export PKG_CONFIG_PATH="$DEPS/usr/lib/$MULTIARCH/pkgconfig:$DEPS/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  CMAKE_EXTRA+=(-DCMAKE_INCLUDE_PATH="$DEPS/usr/include" -DCMAKE_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH")
  [[ -d "$DEPS/usr/share/datasets/fashion-mnist" ]] && : "${STOKER_FASHION_MNIST:=$DEPS/usr/share/datasets/fashion-mnist}"
fi
DATA="${STOKER_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
# The multi-process feed needs c10d's Gloo headers; where PyTorch's own include folder lacks them
# it is left out of this build (and its check says so).
TORCH_INCLUDE="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')"
C10D=OFF
[[ -f "$TORCH_INCLUDE/gloo/algorithm.h" ]] && C10D=ON
log "building against PyTorch's libtorch ($TORCH_PREFIX) in $BUILD (c10d: $C10D)"
cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DSTOKER_GUI=OFF -DSTOKER_TESTS=OFF \
  -DSTOKER_PCH=ON -DSTOKER_C10D="$C10D" -DCMAKE_PREFIX_PATH="$PREFIXES" "${CMAKE_EXTRA[@]}" >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log" >&2; log "configure failed (log: $OUT/configure.log)"; exit 1; }
grep -q 'CUDA=ON' "$OUT/configure.log" || { log "the libtorch found has no CUDA (see $OUT/configure.log)"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target stoker_cuda_check stoker-demo-trainer stoker stoker-torch >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log" >&2; log "build failed (log: $OUT/build.log)"; exit 1; }
log "built in $((SECONDS - START)) s"

log "CUDA checks and figures (ctest -L cuda, then the figures)"
ctest --test-dir "$BUILD" -L cuda --output-on-failure >"$OUT/ctest.log" 2>&1 || true
"$BUILD/bin/stoker_cuda_check" --bench >"$OUT/cuda-check.jsonl" 2>"$OUT/cuda-check.err" || true
cat "$OUT/cuda-check.jsonl" >&2

# Two ranks sharing the one GPU talk through Gloo (NCCL refuses two ranks on one device).
if [[ "$C10D" == ON ]]; then
  log "stoker feed: two ranks on cuda:0 over Gloo"
  port=$((29600 + RANDOM % 300))
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$BUILD/bin/stoker" feed --dataset synthetic:4096,1024 --device cuda:0 --collectives gloo --batch-size 64 \
      --epochs 1 --json >"$OUT/feed-rank$r.json" 2>"$OUT/feed-rank$r.err" &
    pids+=($!)
  done
  rcs=0
  for p in "${pids[@]}"; do wait "$p" || rcs=$((rcs + 1)); done
  "$PY" - "$OUT" "$rcs" >>"$OUT/cuda-check.jsonl" <<'PYEOF'
import json, sys
out, failed = sys.argv[1], int(sys.argv[2])
docs = []
for r in (0, 1):
    try:
        docs.append(json.load(open(f"{out}/feed-rank{r}.json")))
    except (OSError, ValueError):
        docs.append({})
ok = failed == 0 and all(d.get("collectives") == "gloo" and d.get("epochs") for d in docs)
digests = {e["plan_digest"] for d in docs for e in d.get("epochs", [])}
ok = ok and len(digests) == 1
print(json.dumps({"check": "feed_two_ranks_one_gpu_gloo", "ok": ok, "skipped": False,
                  "detail": f"{failed} rank(s) failed; collectives {[d.get('collectives') for d in docs]}; "
                            f"{len(digests)} plan digest(s) (one expected)"}))
PYEOF
else
  echo '{"check": "feed_two_ranks_one_gpu_gloo", "ok": true, "skipped": true, "detail": "PyTorch'"'"'s include folder has no Gloo headers: stoker feed was not built"}' >>"$OUT/cuda-check.jsonl"
fi

log "training step fed by Stoker and by PyTorch's DataLoader (data: $DATA)"
: >"$OUT/train-feed.jsonl"
for mode in resident streaming; do
  "$BUILD/bin/stoker-demo-trainer" --data-dir "$DATA" --device cuda:0 --model cnn --mode "$mode" --epochs 2 \
    --batch-size 256 --workers 4 --json >>"$OUT/train-feed.jsonl" 2>>"$OUT/train-feed.err" ||
    log "stoker-demo-trainer --mode $mode failed (see $OUT/train-feed.err)"
done
for workers in 4 8; do
  "$PY" "$ROOT/tests/bench/train_feed_peer.py" --data-dir "$DATA" --device cuda:0 --epochs 2 --batch-size 256 \
    --workers "$workers" >>"$OUT/train-feed.jsonl" 2>>"$OUT/train-feed.err" ||
    log "train_feed_peer.py --workers $workers failed (see $OUT/train-feed.err)"
done
cat "$OUT/train-feed.jsonl" >&2

"$PY" "$ROOT/tests/cuda/gpu_report.py" --out "$OUT" --ctest-log "$OUT/ctest.log" --checks "$OUT/cuda-check.jsonl" \
  --train "$OUT/train-feed.jsonl" --seconds "$((SECONDS - START))"
