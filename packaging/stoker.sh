#!/usr/bin/env bash
# packaging/stoker.sh -- the one set-up/build/run/test entry point on Debian 12.
#
#   bash packaging/stoker.sh run     install what is missing, build, start the workbench
#                                    (no display: say so and run the CLI on Fashion-MNIST)
#   bash packaging/stoker.sh test    install what is missing, build, run every test (CTest, two
#                                    suites at a time: STOKER_CTEST_JOBS=1 runs them one by one);
#                                    with CI=true or STOKER_TEST_DEB=1 also the .deb install test
#   bash packaging/stoker.sh build   install what is missing and build only
#   bash packaging/stoker.sh check   sanitizers: ASan+UBSan over every suite, then TSan over the
#                                    concurrent suites (STOKER_CHECK=asan or tsan runs one pass)
#   bash packaging/stoker.sh fuzz [SECONDS]   every libFuzzer target for SECONDS each (default 60)
#   bash packaging/stoker.sh soak    fault injection and soak: 10,000 loader epochs with faults,
#                                    hostile telemetry, killed/ENOSPC/truncated conversions, killed ranks
#   bash packaging/stoker.sh gpu-check OUTDIR   on a machine with an NVIDIA GPU and PyTorch: build against
#                                    PyTorch's CUDA libtorch, run the CUDA checks, benchmarks and a
#                                    training-feed comparison, write OUTDIR/gpu-report.{json,md}
#                                    (packaging/gpu-check.sh); without a GPU: says so, exits 2
#   bash packaging/stoker.sh gpu-deps DIR   download (not install) the Debian packages gpu-check
#                                    builds with, for a GPU machine without them (STOKER_GPU_DEPS=DIR)
#
# Safe to run again: packages already installed are skipped and the build is
# incremental. Set STOKER_BUILD_DIR to build elsewhere (default: ./build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${STOKER_BUILD_DIR:-$ROOT/build}"
# Suites run two at a time (most wait on subprocesses, servers and Python half the time; the
# longest start first, see COST in tests/CMakeLists.txt): CI's whole run must stay well inside its
# limit on a 2-core machine. STOKER_CTEST_JOBS=1 runs them one by one.
CTEST_JOBS="${STOKER_CTEST_JOBS:-2}"

# Everything comes from Debian: toolchain, Qt 6 + QCustomPlot, libtorch (CPU),
# JSON/hash/CLI libraries, Xvfb for GUI tests, the real Fashion-MNIST, and
# Debian's PyTorch as the interop and benchmark peer.
PACKAGES=(
  cmake ninja-build g++ pkg-config
  qt6-base-dev libqcustomplot-dev
  qt6-wayland  # the workbench in a Wayland session without Xwayland (`run` takes WAYLAND_DISPLAY as a display)
  libtorch-dev libgloo-dev nlohmann-json3-dev libxxhash-dev libcli11-dev zlib1g-dev
  xvfb xauth
  dataset-fashion-mnist
  python3 python3-torch python3-numpy
  python3-dev  # Python.h for the extension stoker._batches (stoker.Loader's per-batch path; without it, ctypes)
  dpkg-dev desktop-file-utils appstream  # the .deb: dpkg-shlibdeps, metadata checks
  clang libclang-rt-14-dev llvm  # libFuzzer targets and readable sanitizer stacks (llvm-symbolizer)
  libcpp-httplib-dev  # the tests scrape the Prometheus /metrics endpoint with its client
  libminizip-dev  # zip records of .pt files and DCP items, read without libtorch
  libzstd-dev python3-zstandard  # zstd-compressed DCP items (torch >= 2.6), and the fixture writing them
  libjpeg62-turbo-dev libspng-dev libwebp-dev libtiff-dev libstb-dev  # image datasets: JPEG (libjpeg-turbo's libjpeg API), PNG, WebP, TIFF, BMP
  libarchive-dev  # WebDataset tar shards
  python3-skimage  # the real photographs the image benchmarks and tests are cut from
  python3-torchvision prometheus  # the probe's real DDP job (torchvision FashionMNIST), a real Prometheus scrape
  libcurl4-openssl-dev libpugixml-dev libinih-dev  # remote datasets: HTTP(S) + S3 SigV4, S3 listings, ~/.aws files
  nginx-light curl openssl  # tst_remote's HTTP(S) server, its uploads to s3rver, its self-signed certificate
  python3-botocore  # tst_remote's fault proxy checks S3 signatures as S3 does (s3rver does not)
)

# s3rver (npm), tst_remote's S3-compatible server, goes into .test-tools/ of the source tree
# (shared by every build folder, ignored by git). Node.js and npm come from Debian unless a node
# is already installed (NodeSource's bundles its own npm, which Debian's npm would conflict with).
S3RVER_VERSION=3.7.1
# Only the tests need it (`test`, `check`): `run` and `build` stay within Debian's packages.
install_test_tools() {
  local tools="$ROOT/.test-tools"
  # A marker written once npm succeeded: a half install, a version bump or a removed node installs again.
  if [[ -f "$tools/.s3rver-$S3RVER_VERSION" ]] && command -v node >/dev/null; then
    return
  fi
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    local sudo=""
    if [[ $(id -u) -ne 0 ]]; then
      command -v sudo >/dev/null || { log "need root (or sudo) to install: nodejs npm"; exit 2; }
      sudo=sudo
    fi
    log "installing Debian packages: nodejs npm"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  log "installing s3rver $S3RVER_VERSION (npm) into $tools"
  mkdir -p "$tools"
  rm -f "$tools"/.s3rver-*
  # npm's cache inside .test-tools too: not the user's ~/.npm.
  npm install --prefix "$tools" --cache "$tools/.npm-cache" --no-audit --no-fund --loglevel=error \
    "s3rver@$S3RVER_VERSION" >/dev/null
  touch "$tools/.s3rver-$S3RVER_VERSION"
}

log() { printf 'stoker: %s\n' "$*" >&2; }

install_missing() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    return
  fi
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { log "need root (or sudo) to install: ${missing[*]}"; exit 2; }
    sudo=sudo
  fi
  log "installing Debian packages: ${missing[*]}"
  # A first run interrupted while dpkg configured packages leaves them half installed: finish them.
  if [[ -n "$($sudo dpkg --audit 2>/dev/null)" ]]; then
    $sudo env DEBIAN_FRONTEND=noninteractive dpkg --configure -a
  fi
  $sudo apt-get update -qq
  # sudo drops the environment: DEBIAN_FRONTEND goes through env. A fresh cloud machine's
  # unattended upgrades may hold dpkg's lock for minutes: wait for it rather than fail.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
}

build() {
  install_missing
  if [[ -f "$BUILD_DIR/CMakeCache.txt" && ! -f "$BUILD_DIR/build.ninja" ]]; then
    log "$BUILD_DIR was configured with another generator than Ninja: remove it (or set STOKER_BUILD_DIR to another folder)"
    exit 2
  fi
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$BUILD_DIR"
}

run_tests() {
  build
  install_test_tools
  # GUI suites render offscreen; QT_QPA_PLATFORM is also set per test by CTest.
  QT_QPA_PLATFORM=offscreen ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$CTEST_JOBS"
  # The .deb install test installs into /usr: run it in CI (CI=true) or when asked.
  if [[ "${CI:-}" == true || -n "${STOKER_TEST_DEB:-}" ]]; then
    bash "$ROOT/packaging/test-deb.sh" "$BUILD_DIR"
  else
    log "skipping the .deb install test (it installs into /usr): STOKER_TEST_DEB=1 or packaging/test-deb.sh runs it"
  fi
  # CI also runs every suite under ASan+UBSan and a 20 s smoke run of every fuzz target
  # (`check` with STOKER_CHECK=tsan and `fuzz 600` are the longer passes, run by hand).
  if [[ "${CI:-}" == true || -n "${STOKER_TEST_SANITIZERS:-}" ]]; then
    STOKER_CHECK=asan run_check
    run_fuzz 20
  else
    log "skipping the sanitizer pass and the fuzz smoke run (CI=true or STOKER_TEST_SANITIZERS=1 runs them)"
  fi
}

# A sanitizer build of TARGETS (the suites and what they start) in its own folder, COMPILER=gcc or clang
# (a folder configured with the other compiler is configured again from scratch). ASan+UBSan use
# clang: it compiles the libtorch-heavy sources much faster (tst_loader.cpp at -O1 -g1: 12 s against
# g++'s 49 s; the whole build 15.7 min against 22). TSan uses g++: clang 14's TSan runtime aborts
# when a process with threads starts another (QProcess: "CHECK failed: tsan_rtl.cpp:234"), which
# the CLI, multi-process and Monitor suites do; g++ 12's does not.
sanitizer_build() {  # DIR SANITIZERS COMPILER "TARGETS..." [extra cmake args...]
  local dir="$1" sanitize="$2" compiler="$3" targets="$4" cc=gcc cxx=g++
  shift 4
  [[ "$compiler" == clang ]] && cc=clang cxx=clang++
  install_missing
  install_test_tools
  if [[ -f "$dir/CMakeCache.txt" ]]; then
    local was=gcc
    grep -q '^CMAKE_CXX_COMPILER:.*clang' "$dir/CMakeCache.txt" && was=clang
    if [[ "$was" != "$compiler" ]]; then
      log "$dir was configured with $was: configuring it again with $compiler"
      rm -rf "$dir"
    fi
  fi
  if [[ ! -f "$dir/build.ninja" ]]; then
    CC=$cc CXX=$cxx cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSTOKER_SANITIZE="$sanitize" "$@"
  fi
  # shellcheck disable=SC2086  # TARGETS is a list
  cmake --build "$dir" --target $targets
}

# The runtime options of the sanitizer passes; suppressions cover third-party code only
# (packaging/sanitizers/*.supp say why, one by one).
sanitizer_env() {
  local supp="$ROOT/packaging/sanitizers"
  export ASAN_OPTIONS="suppressions=$supp/asan.supp:abort_on_error=1:detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1:strict_string_checks=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
  # history_size=7: the longest history, so the stacks of libtorch's reference releases are
  # restored and their suppressions match. die_after_fork=0: tst_multi_process joins a Gloo group
  # in process and then starts `stoker` through QProcess, whose child execs at once; TSan's
  # refusal is for forked children that go on running threaded code.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:history_size=7:die_after_fork=0"
  export QT_QPA_PLATFORM=offscreen
}

# The concurrent suites: loader workers, multi-device, telemetry publisher/listener, conversions
# with jobs and the async saver, the CLI's threads (convert --jobs 2 and cooperating processes,
# bench, monitor), stoker feed over c10d/Gloo (multi-process), and the workbench's runs (every
# GUI suite: loader runs, conversions and verifies, the Monitor's listener, the planner's pool).
# Qt is not built with TSan: its own locking is invisible, so tsan.supp names the Qt internals
# whose hand-offs would otherwise look like races; Stoker's code around them stays checked.
TSAN_SUITES='tst_loader$|tst_multi_device|tst_telemetry|tst_ckpt_reshard|tst_cli_convert|tst_cli_bench|tst_multi_process|tst_main_window|_workspace'

# One ASan+UBSan build serves the suites and the libFuzzer targets: the same flags (clang,
# address,undefined, -O1 -g1) plus libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link),
# so CI compiles the core once for both: a fuzz build of its own compiled the whole core again (6
# of CI's minutes; the two builds now take 20.0 min against 24.4), while the instrumentation costs
# the suites ~1.5 min (553 -> 647 s). A folder configured without it is configured again in place.
asan_build_dir() { echo "${STOKER_ASAN_BUILD_DIR:-$ROOT/build-asan}"; }
asan_build() {  # TARGETS
  local dir
  dir=$(asan_build_dir)
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^STOKER_FUZZ:BOOL=ON' "$dir/CMakeCache.txt" &&
    grep -q '^CMAKE_CXX_COMPILER:.*clang' "$dir/CMakeCache.txt"; then
    cmake -S "$ROOT" -B "$dir" -DSTOKER_FUZZ=ON >/dev/null
  fi
  sanitizer_build "$dir" address,undefined clang "$1" -DSTOKER_FUZZ=ON
}

run_check() {
  local which="${STOKER_CHECK:-all}"
  install_missing
  install_test_tools
  sanitizer_env
  if [[ "$which" == all || "$which" == asan ]]; then
    local asan_dir
    asan_dir=$(asan_build_dir)
    log "ASan+UBSan: building in $asan_dir"
    asan_build stoker_suites
    log "ASan+UBSan: every suite"
    # ASan's allocator makes the GUI's replots ~3x slower (a loader run's longest event-loop gap:
    # 13-16 ms plain, 38-54 ms here): the 50 ms stall checks get twice that.
    STOKER_TEST_SLOWDOWN=2 ctest --test-dir "$asan_dir" --output-on-failure -j "$CTEST_JOBS"
  fi
  if [[ "$which" == all || "$which" == tsan ]]; then
    local tsan_dir="${STOKER_TSAN_BUILD_DIR:-$ROOT/build-tsan}"
    log "TSan: building in $tsan_dir"
    sanitizer_build "$tsan_dir" thread gcc "stoker_suites stoker_loader_soak stoker_telemetry_hostile"
    log "TSan: the concurrent suites"
    # libtorch's intra-op pool is libgomp, which TSan cannot see into (it reports the pool's own
    # barriers as races): one OpenMP thread keeps it out of the picture; Stoker's threads are ours.
    export OMP_NUM_THREADS=1
    # Everything runs 5-15x slower: the workspaces' 50 ms stall checks get four times that.
    export STOKER_TEST_SLOWDOWN=4
    ctest --test-dir "$tsan_dir" --output-on-failure -R "$TSAN_SUITES"
    log "TSan: loader soak, hostile telemetry, conversions with --jobs 2, killed feed ranks"
    "$tsan_dir/bin/stoker_loader_soak" 1000 | grep -v '^csv,'
    "$tsan_dir/bin/stoker_telemetry_hostile" 20000 200 | tail -4
    /usr/bin/python3 "$ROOT/tests/soak/convert_faults.py" --stoker "$tsan_dir/bin/stoker" --runs 6 --size-mib 32 | tail -3
    /usr/bin/python3 "$ROOT/tests/soak/feed_kill.py" --stoker "$tsan_dir/bin/stoker" --rounds 3 | tail -3
  fi
}

# Every fuzz target for SECONDS, two at a time (a unit slower than 30 s is a hang: a starved
# machine made 10 s units of 1 ms "time out"); a report per target (executions, coverage at the
# start and the end, findings). Inputs that fail land in build-asan/findings/<target>/: copy them
# to tests/fuzz/regressions/<target>/ once fixed, so tst_fuzz_regressions keeps them fixed.
run_fuzz() {
  local seconds="${1:-60}"
  local dir
  dir=$(asan_build_dir)
  asan_build stoker_fuzzers
  sanitizer_env
  export ASAN_OPTIONS="$ASAN_OPTIONS:detect_stack_use_after_return=0"
  mkdir -p "$dir/logs" "$dir/findings" "$dir/corpus"
  local targets
  # STOKER_FUZZ_ONLY="npy pt" fuzzes some targets; every target by default.
  targets=${STOKER_FUZZ_ONLY:-$(sed -n '/^set(STOKER_FUZZ_TARGETS/,/)/p' "$ROOT/CMakeLists.txt" | sed '1s/set(STOKER_FUZZ_TARGETS//; s/)//' | xargs)}
  log "fuzzing $(wc -w <<<"$targets") targets for ${seconds}s each, $(nproc) at a time"
  export dir seconds ROOT
  # The pt target needs full stacks for its one suppression (see packaging/sanitizers/lsan.supp).
  # shellcheck disable=SC2016
  xargs -n1 -P "$(nproc)" bash -c '
    t="$0"
    rm -rf "$dir/findings/$t"
    mkdir -p "$dir/corpus/$t" "$dir/findings/$t"
    lsan="$LSAN_OPTIONS"
    [[ "$t" == pt ]] && lsan="$lsan:fast_unwind_on_malloc=0"
    LSAN_OPTIONS="$lsan" "$dir/fuzz/fuzz_$t" "$dir/corpus/$t" "$ROOT/tests/fuzz/corpus/$t" \
      -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -print_final_stats=1 -artifact_prefix="$dir/findings/$t/" >"$dir/logs/$t.log" 2>&1
    echo "$?" >"$dir/logs/$t.rc"' <<<"$targets"
  local failed=() t report="$dir/fuzz-report.md"
  printf "| target | executions | exec/s | coverage at start → end | corpus | findings |\n| --- | ---: | ---: | --- | ---: | ---: |\n" >"$report"
  for t in $targets; do
    local log="$dir/logs/$t.log" execs rate start end corp finds
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    start=$(sed -n 's/^#[0-9]*[[:space:]]*INITED cov: \([0-9]*\).*/\1/p' "$log" | head -1)
    end=$(sed -n 's/^#[0-9]*[[:space:]].* cov: \([0-9]*\).*/\1/p' "$log" | tail -1)
    corp=$(find "$dir/corpus/$t" -type f | wc -l)
    finds=$(find "$dir/findings/$t" -type f | wc -l)
    [[ "$(cat "$dir/logs/$t.rc")" == 0 && "$finds" == 0 ]] || failed+=("$t")
    printf "| %s | %s | %s | %s → %s | %s | %s |\n" "$t" "${execs:-?}" "${rate:-?}" "${start:-?}" "${end:-?}" "$corp" "$finds" >>"$report"
  done
  cat "$report"
  if ((${#failed[@]})); then
    log "fuzzing found problems in: ${failed[*]} (inputs in $dir/findings/<target>/, output in $dir/logs/<target>.log)"
    return 1
  fi
  log "no crash, leak, hang or broken invariant in any target (report: $report)"
}

# Fault injection and soak (tests/soak/): each program prints its curve or rounds and a verdict;
# logs in build/soak/. STOKER_SOAK_EPOCHS, STOKER_SOAK_RUNS and STOKER_SOAK_ROUNDS scale them.
run_soak() {
  build
  local out="$BUILD_DIR/soak" bin="$BUILD_DIR/bin" failed=()
  mkdir -p "$out"
  log "loader soak (${STOKER_SOAK_EPOCHS:-10000} epochs)"
  "$bin/stoker_loader_soak" "${STOKER_SOAK_EPOCHS:-10000}" | tee "$out/loader.log" | grep -v '^csv,' || failed+=(loader)
  log "hostile telemetry"
  "$bin/stoker_telemetry_hostile" 100000 1000 | tee "$out/telemetry.log" || failed+=(telemetry)
  log "conversion faults (${STOKER_SOAK_RUNS:-50} rounds)"
  /usr/bin/python3 "$ROOT/tests/soak/convert_faults.py" --stoker "$bin/stoker" --runs "${STOKER_SOAK_RUNS:-50}" \
    | tee "$out/convert.log" || failed+=(convert)
  log "killed ranks (${STOKER_SOAK_ROUNDS:-20} rounds)"
  /usr/bin/python3 "$ROOT/tests/soak/feed_kill.py" --stoker "$bin/stoker" --rounds "${STOKER_SOAK_ROUNDS:-20}" \
    | tee "$out/feed.log" || failed+=(feed)
  if ((${#failed[@]})); then
    log "soak failed: ${failed[*]} (logs in $out)"
    return 1
  fi
  log "soak passed (logs in $out)"
}

run_main() {
  build
  local bin="$BUILD_DIR/bin"
  if [[ -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ]]; then
    log "starting the workbench"
    exec "$bin/stoker-workbench" --workspace loader
  fi
  log "no display found (DISPLAY and WAYLAND_DISPLAY are unset): running the command-line equivalent on Fashion-MNIST"
  "$bin/stoker" dataset info fashion-mnist
  # The Loader workspace's Run button: the real loader, batch 256, shuffled.
  "$bin/stoker" bench --dataset fashion-mnist --batch-size 256 --epochs 3
}

# The Debian packages a GUI-less build needs besides libtorch, with the runtime libraries they
# link (libarchive13's own too: a GPU machine's image may lack libxml2 or nettle), and the dataset:
# what a GPU machine without a package manager is given (STOKER_GPU_DEPS).
GPU_DEPS=(
  nlohmann-json3-dev libcli11-dev libxxhash-dev libxxhash0 zlib1g-dev
  libcpp-httplib-dev libcpp-httplib0.11 libminizip-dev libminizip1 libzstd-dev
  libjpeg62-turbo-dev libjpeg62-turbo libspng-dev libspng0 libwebp-dev libwebp7 libwebpdemux2 libwebpmux3
  libtiff-dev libtiff6 libtiffxx6 libjbig0 libjbig-dev liblerc4 liblerc-dev libdeflate0 libdeflate-dev liblzma-dev libzstd1
  libstb-dev libstb0 libarchive-dev libarchive13
  libacl1 libbrotli1 libbrotli-dev libbz2-1.0 liblz4-1 liblzma5 libnettle8 libxml2 libicu72
  libcurl4-openssl-dev libcurl4 libpugixml-dev libpugixml1v5 libinih-dev libinih1  # remote datasets (core/net)
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libidn2-0 libunistring2
  libldap-2.5-0 libsasl2-2 libnghttp2-14 libpsl5 librtmp1 libgnutls30 libhogweed6 libgmp10 libtasn1-6 libp11-kit0 libffi8
  libssh2-1 libssl3  # libcurl4's own libraries: the link needs them where the GPU machine lacks them
  dataset-fashion-mnist
)

fetch_gpu_deps() {
  local dir="${1:-}"
  [[ -n "$dir" ]] || { echo "usage: bash packaging/stoker.sh gpu-deps DIR" >&2; exit 2; }
  mkdir -p "$dir"
  # An image whose package lists were never fetched has nothing to download from.
  [[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v '^lock$\|^partial$')" ]] || apt-get update -qq
  (cd "$dir" && apt-get download "${GPU_DEPS[@]}")
  log "$(ls "$dir"/*.deb | wc -l) packages in $dir: on the GPU machine, STOKER_GPU_DEPS=$dir bash packaging/stoker.sh gpu-check OUTDIR"
}

case "${1:-}" in
  run) run_main ;;
  test) run_tests ;;
  build) build ;;
  check) run_check ;;
  fuzz) run_fuzz "${2:-60}" ;;
  soak) run_soak ;;
  gpu-check) exec bash "$ROOT/packaging/gpu-check.sh" "${2:-}" ;;
  gpu-deps) fetch_gpu_deps "${2:-}" ;;
  *) echo "usage: bash packaging/stoker.sh run|test|build|check|fuzz [SECONDS]|soak|gpu-check OUTDIR|gpu-deps DIR" >&2; exit 2 ;;
esac
