#!/usr/bin/env bash
# Sets up, builds the dev preset (ASan + UBSan, warnings as errors) and runs every test: the C++
# suites under CTest, the tests of the threaded parts again under ThreadSanitizer (the tsan
# preset), the Python SDK's unit tests, the example model server's and the serving
# load generator's tests, the multi-process integration tests (a real head and agents on
# loopback ports), the dashboard's browser tests, and the clang-format check.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, as seconds since this script began: where CI's wall time goes.
stage() { echo "test.sh: +${SECONDS}s $*"; }

stage setup
bash scripts/setup.sh
stage format check
bash scripts/check-format.sh

stage dev build
cmake --preset dev >/dev/null
cmake --build --preset dev -j "$(nproc)"
stage ctest
ctest --preset dev -j "$(nproc)"

# ThreadSanitizer over the tests of the threaded parts (label `threads`: the HTTP server and
# client, the agent, the router, HA, the store's etcd client, the head and the controller): its
# own build in build/tsan of just those tests (target tessera_threaded_tests). Suppressions, each
# with its reason: scripts/tsan.supp.
stage tsan build
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$(nproc)"
stage tsan tests
ctest --preset tsan -j "$(nproc)"

# The fuzz stage (its own clang build in build/fuzz, then a fixed number of inputs from a fixed
# seed over the seed corpus: fuzz/README.md; timed, random-seed runs are for exploring:
# FUZZ_SECONDS=300 scripts/fuzz.sh) shares no files or fixed ports with the pool below (its HTTP
# server listens on port 0). It runs beside the pool, not beside the builds: the builds keep both
# cores busy, while the pool's jobs mostly wait on real processes and timers (a cold run's pool
# used 61% of the two cores), so the fuzz build's CPU fills that idle time instead of
# lengthening the tsan build. Its log is printed once the pool is done. FUZZ_RUNS=0 skips it.
fuzz_pid=""
if [ "${FUZZ_RUNS:-40000}" != 0 ]; then
  mkdir -p build
  stage fuzz, in the background
  set -m  # its own process group, so that a failing test below stops it (and its build) too
  (TIMEFORMAT="fuzz: the stage took %0R s"
    time FUZZ_RUNS="${FUZZ_RUNS:-40000}" bash scripts/fuzz.sh) </dev/null >build/fuzz-stage.log 2>&1 &
  fuzz_pid=$!
  set +m
  trap 'kill -- -"$fuzz_pid" 2>/dev/null || true' EXIT
fi

# The Python SDK's unit tests, the example model server (real processes: a group of one and a
# tensor-parallel group of two), the serving bench's unit tests (bench/serving), the multi-process
# integration tests (a real head and agents on loopback ports; every cluster takes its own ports
# and state directory) and the dashboard (its pure functions, then the pages in headless Chromium
# against a live cluster; screenshots in test-artifacts/dashboard/): one pool of jobs, two at a
# time, longest first (tests/integration/run_parallel.py, TESSERA_IT_JOBS to change the count).
# A suite that keeps one core busy thus shares the machine with an integration file instead of
# leaving the second core idle in a stage of its own. Debian's interpreter: it has python3-torch.
stage Python, example server, load generator, integration and dashboard tests
TESSERA_BIN="$PWD/build/dev/bin/tessera" /usr/bin/python3 tests/integration/run_parallel.py \
  --suite "python_sdk=PYTHONPATH=python /usr/bin/python3 -m unittest discover -s python/tests -t python -v" \
  --suite "example_server=/usr/bin/python3 -m unittest discover -s examples/serve -v" \
  --suite "loadgen=/usr/bin/python3 -m unittest discover -s bench/serving -p 'test_*.py' -v" \
  --suite "gpu_goal_bound=/usr/bin/python3 -m unittest discover -s bench -p 'test_gpu_*.py' -v" \
  --suite "dashboard=node --test tests/dashboard/"

# The parsers (documents, agent messages, HTTP requests) under libFuzzer, started above.
if [ -n "$fuzz_pid" ]; then
  stage waiting for the fuzz stage
  fuzz_status=0
  wait "$fuzz_pid" || fuzz_status=$?
  trap - EXIT
  cat build/fuzz-stage.log
  [ "$fuzz_status" = 0 ] || exit "$fuzz_status"
fi
stage done
