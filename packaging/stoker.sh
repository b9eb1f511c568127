#!/usr/bin/env bash
# packaging/stoker.sh -- the one set-up/build/run/test entry point on Debian 12.
#
#   bash packaging/stoker.sh run     install what is missing, build, start the workbench
#                                    (no display: say so and run the CLI on Fashion-MNIST)
#   bash packaging/stoker.sh test    install what is missing, build, run every test (CTest);
#                                    with CI=true or STOKER_TEST_DEB=1 also the .deb install test
#   bash packaging/stoker.sh build   install what is missing and build only
#
# Safe to run again: packages already installed are skipped and the build is
# incremental. Set STOKER_BUILD_DIR to build elsewhere (default: ./build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${STOKER_BUILD_DIR:-$ROOT/build}"

# Everything comes from Debian: toolchain, Qt 6 + QCustomPlot, libtorch (CPU),
# JSON/hash/CLI libraries, Xvfb for GUI tests, the real Fashion-MNIST, and
# Debian's PyTorch as the interop and benchmark peer.
PACKAGES=(
  cmake ninja-build g++ pkg-config
  qt6-base-dev libqcustomplot-dev
  libtorch-dev libgloo-dev nlohmann-json3-dev libxxhash-dev libcli11-dev zlib1g-dev
  xvfb xauth
  dataset-fashion-mnist
  python3 python3-torch python3-numpy
  dpkg-dev desktop-file-utils appstream  # the .deb: dpkg-shlibdeps, metadata checks
)

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
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() {
  install_missing
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$BUILD_DIR"
}

run_tests() {
  build
  # GUI suites render offscreen; QT_QPA_PLATFORM is also set per test by CTest.
  QT_QPA_PLATFORM=offscreen ctest --test-dir "$BUILD_DIR" --output-on-failure
  # The .deb install test installs into /usr: run it in CI (CI=true) or when asked.
  if [[ -n "${CI:-}" || -n "${STOKER_TEST_DEB:-}" ]]; then
    bash "$ROOT/packaging/test-deb.sh" "$BUILD_DIR"
  else
    log "skipping the .deb install test (it installs into /usr): STOKER_TEST_DEB=1 or packaging/test-deb.sh runs it"
  fi
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

case "${1:-}" in
  run) run_main ;;
  test) run_tests ;;
  build) build ;;
  *) echo "usage: bash packaging/stoker.sh run|test|build" >&2; exit 2 ;;
esac
