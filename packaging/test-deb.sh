#!/usr/bin/env bash
# packaging/test-deb.sh -- build the .deb with CPack, check its metadata, install
# it with apt (which pulls its dependencies from Debian), check that the
# installed stoker, stoker-workbench and stoker-demo-trainer run from /usr/bin
# outside the source tree, then remove it again.
#
#   bash packaging/test-deb.sh [BUILD_DIR]     (needs root or sudo; default ./build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-${STOKER_BUILD_DIR:-$ROOT/build}}"
log() { printf 'test-deb: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || fail "needs root (or sudo) to install the package"
  sudo=sudo
fi
for tool in desktop-file-validate:desktop-file-utils appstreamcli:appstream dpkg-shlibdeps:dpkg-dev; do
  if ! command -v "${tool%%:*}" >/dev/null; then
    log "installing ${tool##*:}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${tool##*:}" >/dev/null
  fi
done

cmake --build "$BUILD_DIR"
rm -f "$BUILD_DIR"/stoker_*.deb
(cd "$BUILD_DIR" && cpack -G DEB >/dev/null)
deb=$(ls "$BUILD_DIR"/stoker_*.deb)
log "built $deb ($(du -h "$deb" | cut -f1))"

depends=$(dpkg-deb -f "$deb" Depends)
log "Depends: $depends"
[[ -n "$depends" ]] || fail "the package declares no dependencies"
grep -q 'libqt6widgets6' <<<"$depends" || fail "Depends lacks Qt Widgets"
grep -q 'libtorch' <<<"$depends" || fail "Depends lacks libtorch"
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/stoker ./usr/lib/stoker/stoker-torch ./usr/bin/stoker-workbench ./usr/bin/stoker-demo-trainer \
         ./usr/share/applications/io.github.stoker.workbench.desktop \
         ./usr/share/icons/hicolor/scalable/apps/stoker.svg \
         ./usr/share/metainfo/io.github.stoker.workbench.metainfo.xml \
         ./usr/lib/python3/dist-packages/stoker_probe/__init__.py \
         ./usr/lib/python3/dist-packages/stoker_probe/__main__.py \
         ./usr/lib/python3/dist-packages/stoker/__init__.py \
         ./usr/lib/python3/dist-packages/stoker/_build_info.py \
         ./usr/lib/python3/dist-packages/stoker/libstoker_c.so; do
  grep -q " $f\$" <<<"$contents" || fail "the package lacks $f"
done
# The extension stoker._batches (stoker.Loader's per-batch path), named for the Python it was built for.
grep -qE " ./usr/lib/python3/dist-packages/stoker/_batches\.cpython-[0-9]+-.*\.so\$" <<<"$contents" \
  || fail "the package lacks the extension stoker._batches"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -x "$deb" "$tmp/root"
desktop-file-validate "$tmp/root/usr/share/applications/io.github.stoker.workbench.desktop" || fail "desktop entry"
appstreamcli validate --no-net --pedantic "$tmp/root/usr/share/metainfo/io.github.stoker.workbench.metainfo.xml" \
  || fail "AppStream metadata"

was_installed=$(dpkg-query -W -f='${Status}' stoker 2>/dev/null | grep -c "install ok installed" || true)
log "installing with apt (dependencies come from Debian)"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$deb" >/dev/null
cleanup() {
  if [[ "$was_installed" == 0 ]]; then $sudo dpkg -r stoker >/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Run the installed programs from an empty directory with a minimal
# environment, so nothing of the build tree can help them.
cd "$tmp"
clean_env=(env -i PATH=/usr/bin:/bin HOME="$tmp" XDG_RUNTIME_DIR="$tmp" QT_QPA_PLATFORM=offscreen)
for exe in /usr/bin/stoker /usr/lib/stoker/stoker-torch /usr/bin/stoker-workbench /usr/bin/stoker-demo-trainer; do
  if ldd "$exe" | grep -q 'not found'; then ldd "$exe" | grep 'not found'; fail "$exe: missing libraries"; fi
  if readelf -d "$exe" | grep -q "$BUILD_DIR"; then fail "$exe: RUNPATH points into the build tree"; fi
done
"${clean_env[@]}" /usr/bin/stoker --version | grep -q 'stoker 0.1.0' || fail "stoker --version"
"${clean_env[@]}" /usr/bin/stoker plan --samples 1000 --world-size 4 --json --no-indices >/dev/null || fail "stoker plan"
# `stoker` itself is torch-free (byte-level checkpoint commands); it hands the rest to stoker-torch.
if ldd /usr/bin/stoker | grep -q libtorch; then fail "/usr/bin/stoker links libtorch"; fi
"${clean_env[@]}" /usr/bin/stoker ckpt inspect "$ROOT/tests/data/safetensors-samples/B.safetensors" >/dev/null \
  || fail "stoker ckpt inspect"
"${clean_env[@]}" /usr/bin/stoker ckpt convert "$ROOT/tests/data/safetensors-samples/B.safetensors" "$tmp/pt" --to pt \
  >/dev/null 2>&1 || fail "stoker ckpt convert --to pt (handed to stoker-torch)"
for w in loader planner checkpoints monitor; do
  "${clean_env[@]}" /usr/bin/stoker-workbench --workspace "$w" --screenshot "$tmp/$w.png" 2>/dev/null \
    || fail "stoker-workbench --workspace $w"
  [[ $(stat -c %s "$tmp/$w.png") -gt 10000 ]] || fail "the $w screenshot is empty"
done
# The probe imports from the installed package (no PYTHONPATH) and publishes a record to a file.
"${clean_env[@]}" /usr/bin/python3 -c "import stoker_probe
for _ in stoker_probe.watch(range(3), publish='file:$tmp/probe.jsonl'): pass
stoker_probe.shutdown()" || fail "python3 -c 'import stoker_probe'"
grep -q '"source":"python"' "$tmp/probe.jsonl" || fail "the installed probe published nothing"
"${clean_env[@]}" /usr/bin/python3 -m stoker_probe --help | grep -q 'publish' || fail "python3 -m stoker_probe --help"
# The Python package imports from the installed copy (no PYTHONPATH) and iterates a loader.
"${clean_env[@]}" /usr/bin/python3 -c "import stoker, torch
loader = stoker.Loader((torch.arange(10.0).reshape(5, 2), torch.arange(5)), batch_size=2)
assert [y.tolist() for _, y in loader] == [[0, 1], [2, 3], [4]]
assert stoker._native.batches is not None, 'the installed extension stoker._batches did not load'
assert stoker.__file__.startswith('/usr/lib/python3/dist-packages/')" || fail "python3 -c 'import stoker' (installed)"
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  "${clean_env[@]}" /usr/bin/python3 -c "import stoker
assert sum(x.shape[0] for x, _ in stoker.Loader('fashion-mnist', batch_size=1000)) == 60000" || fail "stoker.Loader('fashion-mnist') (installed)"
  "${clean_env[@]}" /usr/bin/stoker-demo-trainer --epochs 1 --max-steps 20 >/dev/null 2>&1 || fail "stoker-demo-trainer"
fi
# Removing it leaves nothing behind, not even the byte-code python3 wrote above (the prerm).
if [[ "$was_installed" == 0 ]]; then
  $sudo dpkg -r stoker >/dev/null 2>"$tmp/remove.log" || fail "dpkg -r stoker: $(cat "$tmp/remove.log")"
  for d in /usr/lib/python3/dist-packages/stoker /usr/lib/python3/dist-packages/stoker_probe; do
    [[ ! -e "$d" ]] || fail "removing the package left $d behind"
  done
  was_installed=1  # nothing left for the cleanup to remove
fi
log "ok: the package installs, and stoker, stoker-workbench (4 workspaces), stoker-demo-trainer, the Python probe and the Python package run; it removes cleanly"
