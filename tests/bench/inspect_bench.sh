#!/usr/bin/env bash
# Benchmark (not a test): time `stoker ckpt inspect` on a large safetensors
# file and compare with the minimum a reader must do -- Python reading and
# json-parsing the header (what safetensors' safe_open does before any tensor).
#   bash tests/bench/inspect_bench.sh [SIZE_MIB=1024] [TENSORS=512]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STOKER="${STOKER:-$ROOT/build/bin/stoker}"
SIZE_MIB="${1:-1024}"
TENSORS="${2:-512}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FILE="$WORK/big.safetensors"

/usr/bin/python3 - "$FILE" "$SIZE_MIB" "$TENSORS" <<'PY'
import json, struct, sys, os
path, size_mib, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = size_mib * 1024 * 1024 // count // 4 * 4
header, off = {"__metadata__": {"format": "pt"}}, 0
for i in range(count):
    header[f"layer.{i:04d}.weight"] = {"dtype": "F32", "shape": [per // 4], "data_offsets": [off, off + per]}
    off += per
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    chunk = os.urandom(1 << 20)
    left = off
    while left:
        n = min(left, len(chunk)); f.write(chunk[:n]); left -= n
PY
ls -l "$FILE" | awk '{printf "file: %.2f GiB, '"$TENSORS"' tensors\n", $5/2^30}'
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true

time_ms() {  # best of 5 wall-clock runs, in ms
  local best=999999 t0 t1 ms
  for _ in 1 2 3 4 5; do
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 )); (( ms < best )) && best=$ms
  done
  echo "$best"
}
s=$(time_ms "$STOKER" ckpt inspect "$FILE" --json)
p=$(time_ms /usr/bin/python3 -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; json.loads(f.read(n))" "$FILE")
echo "stoker ckpt inspect --json : ${s} ms (best of 5)"
echo "python3 header json.loads  : ${p} ms (best of 5, the floor any reader pays, interpreter start included)"
