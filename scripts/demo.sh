#!/usr/bin/env bash
# The main job at this stage: build tessera and run the slice-planner demo.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target tessera

echo "== tessera topology 7x 4x4x8"
./build/release/bin/tessera topology 7x 4x4x8
echo
echo "== tessera plan: fill a 9,216-chip Ironwood pod, once per placement policy"
./build/release/bin/tessera plan --seed 1 --down-hosts 32
