#!/usr/bin/env bash
# Smoke test of the benchmarks (issue 50 item 7): runs every bench/*.py with --quick, one at a time,
# each under a timeout, and prints one line per script (name, wall seconds, CPU seconds of the script and
# its children (user + system: what a loaded machine moves least), ok/FAILED). No figure is
# checked, only that the script runs and exits 0; a failure prints the tail of its output, and the
# run exits 1 if any failed. `make bench-quick` (and so `make check`) runs it.
#
#   scripts/bench-quick.sh [NAME ...]   only these scripts (names without bench/ and .py)
#
# PY (default .venv/bin/python) and BENCH_QUICK_TIMEOUT (seconds per script, default 180).
# On timeout the script gets SIGINT (its finally blocks stop the servers it started), SIGKILL 30 s later.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LIMIT=${BENCH_QUICK_TIMEOUT:-180}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-ERROR}

if [ $# -gt 0 ]; then scripts=("${@/#/bench/}"); scripts=("${scripts[@]/%/.py}"); else scripts=(bench/*.py); fi
failed=()
cpu_total=0
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
TIMEFORMAT='%U %S'
all_start=$EPOCHREALTIME
for script in "${scripts[@]}"; do
    name=$(basename "$script" .py)
    log=$(mktemp "${TMPDIR:-/tmp}/bench-quick-$name.XXXXXX")
    start=$EPOCHREALTIME
    { time timeout -s INT -k 30 "$LIMIT" "$PY" "$script" --quick >"$log" 2>&1; } 2>"$log.cpu"
    rc=$?
    secs=$(since "$start")
    cpu=$(awk '{ printf "%.1f", $1 + $2 }' "$log.cpu")
    cpu_total=$(awk -v a="$cpu_total" -v b="$cpu" 'BEGIN { print a + b }')
    if [ $rc -eq 0 ]; then
        printf '%-24s %7.1f s %7.1f CPU s  ok\n' "$name" "$secs" "$cpu"
    else
        why="exit $rc"
        { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && why="timed out after $LIMIT s"
        printf '%-24s %7.1f s %7.1f CPU s  FAILED (%s)\n' "$name" "$secs" "$cpu" "$why"
        tail -n 25 "$log" | sed 's/^/    /'
        failed+=("$name")
    fi
    rm -f "$log" "$log.cpu"
done
total=$(since "$all_start")
printf '%d scripts in %.0f s (%.0f CPU s, load %s), %d failed%s\n' "${#scripts[@]}" "$total" "$cpu_total" \
    "$(cut -d' ' -f1 /proc/loadavg 2>/dev/null)" "${#failed[@]}" "${failed[*]:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
