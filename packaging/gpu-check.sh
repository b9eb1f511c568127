#!/usr/bin/env bash
# packaging/gpu-check.sh OUTDIR -- the one command that proves the CUDA path on a machine with an
# NVIDIA GPU, CUDA and PyTorch (no Qt, no network needed); `bash packaging/stoker.sh gpu-check`.
#
#  1. builds with -DSTOKER_GUI=OFF -DSTOKER_TESTS=OFF against PyTorch's own CUDA libtorch
#     (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') in build-gpu/;
#  2. runs the CUDA checks (CTest label "cuda": tests/cuda/cuda_check.cpp) with their figures, and
#     the Python package built against that PyTorch on the GPU (tests/cuda/python_package.py, with
#     the photo folder of step 4 for its image pipeline);
#  3. trains the same CNN on Fashion-MNIST fed by Stoker (resident, streaming; C++), by the same
#     Python loop over stoker.Loader and over PyTorch's DataLoader(pin_memory=True, num_workers=k)
#     (tests/bench/train_feed_peer.py);
#  4. runs the image pipeline (issue 14) into the GPU: Stoker on an image folder cut from real photos
#     against torchvision's ImageFolder + DataLoader and a plain libjpeg-turbo decode loop
#     (tests/cuda/image_feed.py);
#  5. converts the real torch 2.x checkpoints of tests/fixtures/torch2 to every target and loads
#     each output with this machine's torch (tests/fixtures/torch2/check_stoker_outputs.py);
#  6. writes OUTDIR/gpu-report.json and OUTDIR/gpu-report.md (tests/cuda/gpu_report.py) and exits
#     non-zero when a check or a run of the image step failed.
# Without a GPU it says so in one line and exits 2. STOKER_GPU_STEPS picks steps 2-5 (default
# "checks,train,images,ckpt"; "python" runs the Python package's checks of step 2 alone);
# STOKER_GPU_PER_CLASS sizes the photo folder (default 500 a class, 10 classes: on 16 cores,
# batches of 64 and 5,000 images leave a tail in every epoch).
#
# Build dependencies other than PyTorch (JSON, CLI, hashing, image and archive libraries) come from
# the system; on a machine without them or a package manager, STOKER_GPU_DEPS=DIR names a folder of
# Debian packages (`bash packaging/stoker.sh gpu-deps DIR` downloads them where apt works) that is
# unpacked beside the build. STOKER_FASHION_MNIST=DIR points at the dataset when it is not in
# /usr/share/datasets/fashion-mnist (the dataset-fashion-mnist package is among the gpu-deps).
# STOKER_SKIMAGE_DATA=DIR holds the source photos of the image step where python3-skimage is not
# installed (tests/datasets/photo_sources.py).
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
# Python runs with the machine's own library path: the carried Debian libraries are for Stoker's
# programs, and must not stand in for the ones PyTorch was built against.
ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
STEPS=",${STOKER_GPU_STEPS:-checks,train,images,ckpt},"
step() { [[ "$STEPS" == *",$1,"* ]]; }
py() { LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY" "$@"; }
# Python importing stoker: the machine's libraries first (PyTorch's), the carried ones after, for
# libstoker_c.so's own needs.
py_stoker() { LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PY" "$@"; }
CMAKE_EXTRA=()

# Carried Debian packages: unpacked into BUILD/deps, their pkg-config files pointed there.
if [[ -n "${STOKER_GPU_DEPS:-}" ]]; then
  DEPS="$BUILD/deps"
  # Unpacked again whenever the set of packages or the way they are unpacked changed (the marker
  # says both), and configured afresh then: CMake keeps what pkg-config said in its cache.
  marker="$(ls "$STOKER_GPU_DEPS"; echo "pkg-config paths rewritten: all")"
  if [[ "$(cat "$DEPS/.unpacked" 2>/dev/null)" != "$marker" ]]; then
    log "unpacking $(ls "$STOKER_GPU_DEPS"/*.deb | wc -l) carried packages into $DEPS"
    rm -rf "$DEPS" "$BUILD/CMakeCache.txt" && mkdir -p "$DEPS"
    for deb in "$STOKER_GPU_DEPS"/*.deb; do dpkg-deb -x "$deb" "$DEPS" 2>/dev/null || (cd "$DEPS" && ar p "$deb" data.tar.xz | tar xJ); done
    # Every path of their pkg-config files, not only prefix=: Debian's libjpeg.pc names libdir and
    # includedir as absolute /usr paths, which would pair the carried headers with the machine's
    # own libjpeg (another ABI: libjpeg.so.8 against libjpeg.so.62).
    find "$DEPS" -name '*.pc' -exec sed -i -E "s#^(prefix|exec_prefix|libdir|includedir|sharedlibdir)=/usr#\1=$DEPS/usr#" {} +
    echo "$marker" >"$DEPS/.unpacked"
  fi
  MULTIARCH="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
  PREFIXES="$PREFIXES;$DEPS/usr"
  export PKG_CONFIG_PATH="$DEPS/usr/lib/$MULTIARCH/pkgconfig:$DEPS/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Their headers before the machine's own: jconfig.h sits in the multiarch folder, which no
  # pkg-config file names, and a machine's libjpeg8 jconfig.h there says version 80 to a build
  # linking the carried libjpeg.so.62 ("Wrong JPEG library version").
  export CPATH="$DEPS/usr/include/$MULTIARCH:$DEPS/usr/include${CPATH:+:$CPATH}"
  CMAKE_EXTRA+=(-DCMAKE_INCLUDE_PATH="$DEPS/usr/include" -DCMAKE_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH")
  [[ -d "$DEPS/usr/share/datasets/fashion-mnist" ]] && : "${STOKER_FASHION_MNIST:=$DEPS/usr/share/datasets/fashion-mnist}"
fi
DATA="${STOKER_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"

# The image step's photo folder is cut while the build runs (one core of many).
PHOTOS="${STOKER_GPU_PHOTOS:-$BUILD/bench-data/photos-${STOKER_GPU_PER_CLASS:-500}}"
PHOTOS_PID=""
if { step images || step checks || step python; } && [[ ! -d "$PHOTOS" ]]; then
  ( py "$ROOT/tests/datasets/make_photo_folder.py" "$PHOTOS.tmp" --per-class "${STOKER_GPU_PER_CLASS:-500}" &&
    mv "$PHOTOS.tmp" "$PHOTOS" ) >"$OUT/photos.log" 2>&1 &
  PHOTOS_PID=$!
fi

# Waited for once, by the first step that reads the folder (the Python checks or the image step).
PHOTOS_WAITED=""
photos_ready() {
  if [[ -n "$PHOTOS_PID" && -z "$PHOTOS_WAITED" ]]; then
    PHOTOS_WAITED=1
    wait "$PHOTOS_PID" || log "could not build the photo folder (python3-skimage's photos: STOKER_SKIMAGE_DATA; see $OUT/photos.log)"
  fi
  [[ -d "$PHOTOS" ]]
}

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
# The multi-process feed uses c10d: NCCL for ranks on GPUs, Gloo where its headers are (PyTorch's
# wheels ship none). AUTO builds it with whatever is there; the configure log says which.
C10D=AUTO
configure() {
  cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DSTOKER_GUI=OFF -DSTOKER_TESTS=OFF \
    -DSTOKER_PCH=ON -DSTOKER_C10D="$C10D" -DCMAKE_PREFIX_PATH="$PREFIXES" "${CMAKE_EXTRA[@]}" >"$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log" >&2; log "configure failed (log: $OUT/configure.log)"; exit 1; }
  grep -q 'CUDA=ON' "$OUT/configure.log" || { log "the libtorch found has no CUDA (see $OUT/configure.log)"; exit 1; }
  C10D_BACKENDS="$(sed -n 's/.*Stoker: c10d backends: *//p' "$OUT/configure.log" | tail -1)"
  log "c10d backends: ${C10D_BACKENDS:-none}"
}
# -k 0 (Ninja: keep going): one run shows every file that fails to compile against this libtorch.
KEEP_GOING=()
[[ ${#GENERATOR[@]} -gt 0 ]] && KEEP_GOING=(-- -k 0)
build() {
  cmake --build "$BUILD" -j "$JOBS" --target stoker_cuda_check stoker-demo-trainer stoker stoker-torch \
    stoker_jpeg_decode_loop "${KEEP_GOING[@]}" >"$OUT/build$1.log" 2>&1
}
log "building against PyTorch's libtorch ($TORCH_PREFIX) in $BUILD"
configure
if ! build ""; then
  # The process groups are the part of the build most tied to one libtorch's c10d; without them the
  # rest still checks the GPU path, and the report says c10d is out (its checks skip or fail).
  if [[ "$C10D" != OFF ]] && grep -q 'dist/dist_group' "$OUT/build.log"; then
    log "c10d's process groups did not compile against this libtorch (log: $OUT/build.log); building without"
    C10D=OFF
    configure
    build -without-c10d || { tail -40 "$OUT/build-without-c10d.log" >&2; log "build failed (log: $OUT/build-without-c10d.log)"; exit 1; }
  else
    tail -40 "$OUT/build.log" >&2; log "build failed (log: $OUT/build.log)"; exit 1
  fi
fi
# The Python package's library on its own: where it does not build against this libtorch, its
# checks fail and say why, and the C++ checks still run.
PYTHON_BUILT=1
cmake --build "$BUILD" -j "$JOBS" --target stoker_c "${KEEP_GOING[@]}" >"$OUT/build-python.log" 2>&1 ||
  { PYTHON_BUILT=""; tail -40 "$OUT/build-python.log" >&2; log "the Python package did not build (log: $OUT/build-python.log)"; }
# Its optional extension (configured only where the python3 with this torch has Python.h): without
# it the package takes the ctypes path, and the import check says which.
if [[ -n "$PYTHON_BUILT" ]]; then
  cmake --build "$BUILD" -j "$JOBS" --target stoker_batches >"$OUT/build-python-extension.log" 2>&1 ||
    log "the extension stoker._batches was not built (log: $OUT/build-python-extension.log): batches take the ctypes path"
fi
log "built in $((SECONDS - START)) s"
# Two libjpeg ABIs in one process (the carried libjpeg.so.62 beside a machine's libjpeg.so.8) mix
# struct layouts between the headers compiled against and the library called: refuse to go on.
if [[ "$(ldd "$BUILD/bin/stoker-torch" | grep -c 'libjpeg\.so')" -gt 1 ]]; then
  ldd "$BUILD/bin/stoker-torch" | grep 'libjpeg' >&2
  log "stoker-torch links two libjpeg libraries (see above): the build mixed the carried and the machine's"
  exit 1
fi

: >"$OUT/cuda-check.jsonl"; : >"$OUT/train-feed.jsonl"
if step checks; then
  log "CUDA checks and figures (ctest -L cuda, then the figures)"
  ctest --test-dir "$BUILD" -L cuda --output-on-failure >"$OUT/ctest.log" 2>&1 || true
  # The u8-over-PCIe check and the image pipeline's figures read the photo folder.
  CHECK_PHOTOS=""
  photos_ready && CHECK_PHOTOS="$PHOTOS"
  STOKER_CHECK_PHOTOS="$CHECK_PHOTOS" "$BUILD/bin/stoker_cuda_check" --bench >"$OUT/cuda-check.jsonl" 2>"$OUT/cuda-check.err" || true
  cat "$OUT/cuda-check.jsonl" >&2

  # stoker feed as a GPU job's rank runs it: one rank on cuda:0, collectives over NCCL.
  if [[ "$C10D_BACKENDS" == *nccl* ]]; then
    log "stoker feed: one rank on cuda:0 over NCCL"
    rc=0
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29300 + RANDOM % 100)) \
      "$BUILD/bin/stoker" feed --dataset synthetic:4096,1024 --device cuda:0 --collectives nccl --batch-size 64 \
      --epochs 2 --json >"$OUT/feed-nccl.json" 2>"$OUT/feed-nccl.err" || rc=$?
    py - "$OUT" "$rc" >>"$OUT/cuda-check.jsonl" <<'PYEOF'
import json, sys
out, rc = sys.argv[1], int(sys.argv[2])
try:
    d = json.load(open(f"{out}/feed-nccl.json"))
except (OSError, ValueError):
    d = {}
ok = rc == 0 and d.get("collectives") == "nccl" and len(d.get("epochs", [])) == 2
err = open(f"{out}/feed-nccl.err").read().strip().splitlines()
print(json.dumps({"check": "feed_one_rank_nccl", "ok": ok, "skipped": False,
                  "detail": f"exit {rc}; collectives {d.get('collectives')}; {len(d.get('epochs', []))} epoch(s) of 2"
                            + ("" if ok or not err else f"; {err[-1]}")}))
PYEOF
  elif [[ "$C10D" == OFF ]]; then
    echo '{"check": "feed_one_rank_nccl", "ok": false, "skipped": false, "detail": "c10d did not compile against this libtorch: see build.log"}' >>"$OUT/cuda-check.jsonl"
  else
    echo '{"check": "feed_one_rank_nccl", "ok": false, "skipped": false, "detail": "this build has no NCCL process group (nccl.h not found: see configure.log)"}' >>"$OUT/cuda-check.jsonl"
  fi

  # Two ranks sharing the one GPU talk through Gloo (NCCL refuses two ranks on one device).
  if [[ "$C10D_BACKENDS" == *gloo* ]]; then
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
    py - "$OUT" "$rcs" >>"$OUT/cuda-check.jsonl" <<'PYEOF'
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
    echo '{"check": "feed_two_ranks_one_gpu_gloo", "ok": true, "skipped": true, "detail": "this build has no Gloo (PyTorch'"'"'s include folder has no Gloo headers): two ranks cannot share the GPU, and NCCL takes one rank a GPU"}' >>"$OUT/cuda-check.jsonl"
  fi
fi
# The Python package (import stoker) built against this PyTorch, on the GPU (with the C++ checks,
# or alone: STOKER_GPU_STEPS=python).
if step checks || step python; then
  log "the Python package on cuda:0 (tests/cuda/python_package.py)"
  photo_args=()
  photos_ready && photo_args=(--photos "$PHOTOS")
  if [[ -z "$PYTHON_BUILT" ]]; then
    echo '{"check": "python_package", "ok": false, "skipped": false, "detail": "libstoker_c.so did not build: see build-python.log"}' >>"$OUT/cuda-check.jsonl"
  else
    py_stoker "$ROOT/tests/cuda/python_package.py" --build "$BUILD" --data "$DATA" "${photo_args[@]}" \
      >>"$OUT/cuda-check.jsonl" 2>"$OUT/python-package.err" ||
      echo '{"check": "python_package", "ok": false, "skipped": false, "detail": "python_package.py failed: see python-package.err"}' >>"$OUT/cuda-check.jsonl"
  fi
fi

# Real torch 2.x checkpoints (tests/fixtures/torch2, written by torch 2.11) converted by this
# build's stoker to every target, and each output loaded by this machine's torch (dcp.load,
# torch.load(weights_only=True), safetensors) against the digests torch recorded.
if step ckpt; then
  log "checkpoints: stoker ckpt convert of torch 2.x fixtures, loaded by torch $(py -c 'import torch; print(torch.__version__)')"
  py "$ROOT/tests/fixtures/torch2/check_stoker_outputs.py" --stoker "$BUILD/bin/stoker" --fixtures "$ROOT/tests/fixtures/torch2" \
    --work "$BUILD/ckpt-check" --lib-path "${LD_LIBRARY_PATH:-}" >>"$OUT/cuda-check.jsonl" 2>"$OUT/ckpt-check.err" ||
    log "a conversion or a load by torch failed (see the report and $OUT/ckpt-check.err)"
fi

if step train; then
  log "training step fed by Stoker and by PyTorch's DataLoader (data: $DATA)"
  : >"$OUT/train-feed.jsonl"
  for mode in resident streaming; do
    "$BUILD/bin/stoker-demo-trainer" --data-dir "$DATA" --device cuda:0 --model cnn --mode "$mode" --epochs 2 \
      --batch-size 256 --workers 4 --json >>"$OUT/train-feed.jsonl" 2>>"$OUT/train-feed.err" ||
      log "stoker-demo-trainer --mode $mode failed (see $OUT/train-feed.err)"
  done
  # The same loop with stoker.Loader in place of the DataLoader: the Python package's figure.
  [[ -n "$PYTHON_BUILT" ]] && py_stoker "$ROOT/tests/bench/train_feed_peer.py" --feeder stoker --stoker-build "$BUILD" --data-dir "$DATA" \
    --device cuda:0 --epochs 2 --batch-size 256 --workers 4 >>"$OUT/train-feed.jsonl" 2>>"$OUT/train-feed.err" ||
    log "train_feed_peer.py --feeder stoker failed (see $OUT/train-feed.err)"
  for workers in 4 8; do
    py "$ROOT/tests/bench/train_feed_peer.py" --data-dir "$DATA" --device cuda:0 --epochs 2 --batch-size 256 \
      --workers "$workers" >>"$OUT/train-feed.jsonl" 2>>"$OUT/train-feed.err" ||
      log "train_feed_peer.py --workers $workers failed (see $OUT/train-feed.err)"
  done
  cat "$OUT/train-feed.jsonl" >&2
fi

: >"$OUT/image-feed.jsonl"
if step images; then
  log "image pipeline into cuda:0: Stoker vs torchvision vs a libjpeg-turbo decode loop ($PHOTOS)"
  if photos_ready; then
    py "$ROOT/tests/cuda/image_feed.py" --build "$BUILD" --data "$PHOTOS" --device cuda:0 --lib-path "${LD_LIBRARY_PATH:-}" \
      >"$OUT/image-feed.jsonl" 2>"$OUT/image-feed.err" || log "a run of image_feed.py failed (see $OUT/image-feed.err)"
  else
    echo '{"image_run": "photo folder", "error": "not built: see photos.log"}' >"$OUT/image-feed.jsonl"
  fi
  cat "$OUT/image-feed.jsonl" >&2
fi

py "$ROOT/tests/cuda/gpu_report.py" --out "$OUT" --ctest-log "$OUT/ctest.log" --checks "$OUT/cuda-check.jsonl" \
  --train "$OUT/train-feed.jsonl" --images "$OUT/image-feed.jsonl" --seconds "$((SECONDS - START))" \
  $(step checks || step python || step ckpt || echo --checks-not-run)
