#!/usr/bin/env bash
# The GPU domains comparison of issue 36 (`tessera sim --gpu`, bench/README.md "GPU domains"):
# tessera against slurm-block on the ITP clusters and openb as bench/README.md sizes them, then on
# the mixed traces of bench/gpu_mixed_traces.py (sets A and B; set C, on which no setting was
# chosen). One goal line per run, then per set how many runs with domain-class jobs met each
# half of the goal.
# Usage: bench/gpu_domains.sh [path/to/tessera] [extra sim flags...]
#        (default build/release/bin/tessera; e.g. --las-h off to compare a setting)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/release/bin/tessera}
shift || true
traces=${TESSERA_TRACES:-$here/../shared/traces}
itp=$traces/microsoft-itp-elasticflow
mixed=$(mktemp -d)
trap 'rm -rf "$mixed"' EXIT

goal() {  # label sim-args...: prints "label: <ratios>" (empty without domain-class jobs)
  local label=$1 out
  shift
  if ! out=$("$bin" sim --no-progress --policies tessera,slurm-block "$@" 2>"$mixed/stderr"); then
    cat "$mixed/stderr" >&2
    exit 1
  fi
  out=$(grep '^goal' <<<"$out" || true)
  echo "$label: ${out#goal: domain-class p95 wait tessera/slurm-block = }"
}

summary() {  # set-name file
  local both dom all runs
  runs=$(grep -c 'goal <= 0.5x' "$2" || true)
  dom=$(grep -c '0.5x, met' "$2" || true)
  all=$(grep 'goal <= 0.5x' "$2" | grep -c '1x, met' || true)
  both=$(grep -c '0.5x, met.*1x, met' "$2" || true)
  echo "$1: $runs runs with domain-class jobs; both halves $both, domain half $dom, overall half $all"
}

{
  for spec in "01 8 1" "02 13 2" "03 21 3" "04 73 9" "05 2 1" "06 13 2" "07 38 5" "08 10 2" \
    "10 2 1"; do
    read -r c h d <<<"$spec"
    goal "h100 cluster$c" --gpu h100 --hosts "$h" --trace "$itp/cluster$c.csv" "$@"
    goal "gb200 cluster$c" --gpu gb200-nvl72 --domains "$d" --trace "$itp/cluster$c.csv" "$@"
  done
  goal "h100 openb" --gpu h100 --hosts 8 \
    --trace "$traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv" "$@"
} | tee "$mixed/itp.txt"
for set in ab c; do
  mkdir -p "$mixed/$set"
  python3 "$here/bench/gpu_mixed_traces.py" "$mixed/$set" --traces "$itp" --set "$set" \
    >"$mixed/$set/fleets.txt"
  while read -r file hosts domains; do
    name=$(basename "$file" .csv)
    goal "h100 $name" --gpu h100 --hosts "$hosts" --trace "$file" "$@"
    goal "gb200 $name" --gpu gb200-nvl72 --domains "$domains" --trace "$file" "$@"
  done <"$mixed/$set/fleets.txt" | tee "$mixed/$set.txt"
done
echo
summary "ITP and openb" "$mixed/itp.txt"
summary "mixed, sets A and B" "$mixed/ab.txt"
summary "mixed, set C" "$mixed/c.txt"
