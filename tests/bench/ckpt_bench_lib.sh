# Shared by the checkpoint benchmarks (reshard_bench.sh, dcp_bench.sh): sourced, not run.
# Sets root and stoker, checks the tools, and defines measure, median and report.
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

# report MIB BYTES PY_LABEL: the medians of cp_times, st_times and py_times (arrays the caller
# filled, with rss_cp, rss_st and rss_py), one row each, and the ratios.
report() {
  local mib=$1 bytes=$2 py_label=$3
  local t_cp t_st t_py row name t rss
  t_cp=$(median "${cp_times[@]}"); t_st=$(median "${st_times[@]}"); t_py=$(median "${py_times[@]}")
  echo "runs: cp ${cp_times[*]} | stoker ${st_times[*]} | python ${py_times[*]}"
  for row in "cp -r:$t_cp:$rss_cp" "stoker convert:$t_st:$rss_st" "$py_label:$t_py:$rss_py"; do
    IFS=: read -r name t rss <<<"$row"
    printf "%-8s %-22s %9.2f %11.0f %12.0f\n" "${mib}MiB" "$name" "$t" "$(echo "$bytes / 1048576 / $t" | bc -l)" \
      "$(echo "$rss / 1024" | bc -l)"
  done
  printf "%-8s stoker vs cp -r: %.2fx cp's speed; vs python ref: %.2fx faster\n" "${mib}MiB" \
    "$(echo "$t_cp / $t_st" | bc -l)" "$(echo "$t_py / $t_st" | bc -l)"
}
