# Shared by the checkpoint benchmarks (reshard_bench.sh, dcp_bench.sh): sourced, not run.
# Sets root and stoker, checks the tools, and defines measure and median.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
stoker=${STOKER:-$root/build/bin/stoker}
[ -x "$stoker" ] || { echo "build first: bash packaging/stoker.sh build" >&2; exit 2; }
for tool in bc /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install -y bc time" >&2; exit 2; }
done

measure() {  # label, command... -> "seconds rss_kib" (the command, then sync)
  local log; log=$(mktemp)
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$log" "${@:2}" >/dev/null 2>&1
  sync
  end=$(date +%s.%N)
  local rss; rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$log")
  rm -f "$log"
  echo "$(echo "$end - $start" | bc -l) $rss"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
