#!/usr/bin/env bash
# The main job: a local emulated cluster of two v6e 4x4 slices (8 hosts, one agent each) runs
# a real PyTorch data-parallel training job across both slices, then is torn down.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target tessera

T=./build/release/bin/tessera
STATE=.tessera
trap '$T down --state-dir "$STATE" --purge >/dev/null 2>&1 || true' EXIT
$T down --state-dir "$STATE" --purge >/dev/null 2>&1 || true

echo "== tessera up: a head and 8 emulated v6e hosts in two 4x4 slices"
$T up --generation v6e --topology 4x4 --slices 2 --state-dir "$STATE"
echo
$T get hosts --state-dir "$STATE"
echo
echo "== tessera apply -f examples/train/job.yaml (2 slices x 4 workers, gloo all-reduce)"
$T apply -f examples/train/job.yaml --state-dir "$STATE"
echo "== worker 0's log, followed until the job ends"
until $T logs job train-demo --worker 0 -f --state-dir "$STATE" 2>/dev/null; do sleep 0.2; done
echo
# Rank 0's log ends before every worker has exited: wait for the job itself (2 minutes at most).
phase_of() {
  $T get jobs -o json --state-dir "$STATE" | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin)["items"][0]["status"]["phase"])'
}
for _ in $(seq 600); do
  phase=$(phase_of)
  case "$phase" in Succeeded | Failed) break ;; esac
  sleep 0.2
done
$T get jobs --state-dir "$STATE"
echo
$T describe job train-demo --state-dir "$STATE"
echo
echo "== tessera down"
$T down --state-dir "$STATE" --purge
trap - EXIT
[ "$phase" = Succeeded ]
