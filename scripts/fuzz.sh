#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset `fuzz`: clang, ASan + UBSan) and runs each one over
# the seed corpus in fuzz/corpus/<target>/ (fuzz/README.md), either for a fixed number of inputs
# from a fixed seed (deterministic: what CI runs) or for a bounded time (exploring).
#
#   FUZZ_RUNS=50000 scripts/fuzz.sh  every target, 50,000 inputs each from seed FUZZ_SEED (1)
#   scripts/fuzz.sh                  every target, FUZZ_SECONDS (30) each, a random seed
#   FUZZ_SECONDS=300 scripts/fuzz.sh manifest_fuzz
#
# The seed corpus is read, never written: what a timed run finds goes to build/fuzz/corpus/<target>/
# (kept between runs) and crashing inputs to build/fuzz/crashes/. A counted run starts from the
# seed corpus alone (its findings go to a fresh build/fuzz/run/<target>/), so the same commit
# runs the same inputs on every machine. Exits non-zero on the
# first target that crashes, hangs (-timeout: 5 s per input, 15 for http_fuzz) or goes over
# -rss_limit_mb; the seed is printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-30}"
runs="${FUZZ_RUNS:-}"
seed="${FUZZ_SEED:-1}"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(manifest_fuzz wire_fuzz http_fuzz)

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target "${targets[@]}"

mkdir -p build/fuzz/crashes
for target in "${targets[@]}"; do
  seeds="fuzz/corpus/${target%_fuzz}"
  found="build/fuzz/corpus/${target%_fuzz}"
  mkdir -p "$found"
  if [ -n "$runs" ]; then
    # The runs are spread by the target's speed: http_fuzz does a loopback round trip per input.
    target_runs="$runs"
    [ "$target" = http_fuzz ] && target_runs=$((runs / 10))
    budget=(-runs="$target_runs" -seed="$seed")
    # libFuzzer writes what it finds into the first directory: an empty one made for this run,
    # so the seed corpus stays as committed and the next run starts from the same inputs.
    scratch="build/fuzz/run/${target%_fuzz}"
    rm -rf "$scratch" && mkdir -p "$scratch"
    dirs=("$scratch" "$seeds")
    echo "fuzz: $target, $target_runs inputs from seed $seed (seeds $seeds)"
  else
    budget=(-max_total_time="$seconds")
    dirs=("$found" "$seeds")
    echo "fuzz: $target for ${seconds}s (seeds $seeds, findings $found)"
  fi
  # 5 s per input; http_fuzz does a loopback round trip per input, which a loaded machine can
  # stall for seconds, so it gets 15.
  timeout=5
  [ "$target" = http_fuzz ] && timeout=15
  if ! "build/fuzz/fuzz/$target" "${budget[@]}" -timeout="$timeout" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build/fuzz/crashes/$target-" \
      "${dirs[@]}" 2>"build/fuzz/$target.log"; then
    tail -n 60 "build/fuzz/$target.log" >&2
    echo "fuzz: $target failed; the input is in build/fuzz/crashes/ (rerun: build/fuzz/fuzz/$target FILE)." >&2
    echo "fuzz: add it to $seeds/ and as a regression test in the unit tests." >&2
    exit 1
  fi
  grep -E '^INFO: Seed:|^stat::number_of_executed_units|^stat::peak_rss_mb' "build/fuzz/$target.log" |
    sed "s/^/fuzz: $target /"
done
