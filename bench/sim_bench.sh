#!/usr/bin/env bash
# Simulator benchmark: wall time of `tessera sim` (release build) for
#   1. ITP cluster04.csv (15,802 jobs) on the 9,216-chip Ironwood pod, budget 10 s;
#   2. a generated 1,000,000-job workload on the same pod at load 0.9, budget 120 s;
#   3. a generated 100,000-job workload at load 1.1 on one block of 16 cubes with EASY backfill
#      and defragmentation (a long line at every pass), budget 60 s.
# Usage: bench/sim_bench.sh [path/to/tessera]   (default build/release/bin/tessera)
# Exits 1 if a run fails or goes over its budget. Figures: bench/README.md, "Simulator".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/release/bin/tessera}
traces=${TESSERA_TRACES:-$here/../shared/traces}

run() {  # budget_s label args...
  local budget=$1 label=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" sim --no-progress "$@" >/dev/null
  t1=$(date +%s.%N)
  local s
  s=$(echo "$t1 - $t0" | bc)
  printf '%-48s %8.2f s (budget %s s)\n' "$label" "$s" "$budget"
  if (($(echo "$s > $budget" | bc))); then
    echo "over budget" >&2
    exit 1
  fi
}

run 10 "cluster04, ironwood, tessera/backfill" \
  --trace "$traces/microsoft-itp-elasticflow/cluster04.csv" --policies tessera
run 10 "cluster04, ironwood, 3 policies x 3 admissions" \
  --trace "$traces/microsoft-itp-elasticflow/cluster04.csv" --admission fifo,backfill,priority
run 120 "1,000,000 generated jobs, tessera/backfill" \
  --generate 1000000 --load 0.9 --policies tessera
run 120 "1,000,000 generated jobs, 3 policies, backfill" \
  --generate 1000000 --load 0.9
run 60 "100,000 generated jobs, 16 cubes, tessera/easy" \
  --generate 100000 --load 1.1 --blocks 1 --cubes-per-block 16 --policies tessera --admission easy
