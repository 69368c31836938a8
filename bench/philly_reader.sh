#!/usr/bin/env bash
# The Philly reader end to end (bench/README.md, "The Philly reader"): each ITP cluster written
# as a Philly cluster_job_log (bench/itp_as_philly.py) must give, through `tessera sim --gpu`,
# the event hashes of the same trace as a CSV counted from its first submission, for every
# policy, on h100 and on gb200-nvl72 fleets sized as bench/README.md "GPU domains" sizes them.
# Then the time and memory to read the largest one, log against CSV.
# Usage: bench/philly_reader.sh [path/to/tessera]   (default build/release/bin/tessera)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/release/bin/tessera}
itp=${TESSERA_TRACES:-$here/../shared/traces}/microsoft-itp-elasticflow
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

hashes() {  # sim-args...: the runs' event hashes, one line
  "$bin" sim --no-progress --policies tessera,slurm-block,first-fit "$@" -o json |
    python3 -c 'import json, sys; print(" ".join(r["hash"] for r in json.load(sys.stdin)["runs"]))'
}

same=0 runs=0
for spec in "01 8 1" "02 13 2" "03 21 3" "04 73 9" "05 2 1" "06 13 2" "07 38 5" "08 10 2"; do
  set -- $spec
  "$here/bench/itp_as_philly.py" "$itp/cluster$1.csv" "$work/c$1.json" \
    --shifted-csv "$work/c$1.csv" >/dev/null
  for fleet in "--gpu h100 --hosts $2" "--gpu gb200-nvl72 --domains $3"; do
    runs=$((runs + 1))
    # shellcheck disable=SC2086
    csv=$(hashes $fleet --trace "$work/c$1.csv")
    # shellcheck disable=SC2086
    log=$(hashes $fleet --trace "$work/c$1.json")
    if [ "$csv" = "$log" ]; then
      same=$((same + 1))
    else
      echo "cluster$1 $fleet: csv $csv, philly $log"
    fi
  done
done
echo "the same event hashes on $same of $runs runs (3 policies each)"
for f in c04.csv c04.json; do
  /usr/bin/time -f "$f ($(wc -c <"$work/$f") bytes): %e s, %M KB at most" \
    "$bin" sim --no-progress --gpu h100 --hosts 73 --policies first-fit --trace "$work/$f" \
    >/dev/null
done
