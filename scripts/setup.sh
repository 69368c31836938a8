#!/usr/bin/env bash
# Installs every Debian package tessera needs to build, test and run its demo.
# Idempotent: packages already present are left as they are. Run as root (or with sudo).
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config clang-format
  # compiler cache: CI's clean clone reuses the objects the work tree built (CMakeLists.txt)
  ccache
  # fuzzing: clang with libFuzzer (scripts/fuzz.sh); lld, the faster linker
  clang lld
  # libraries
  libboost-dev libboost-system-dev nlohmann-json3-dev libyaml-cpp-dev libsqlite3-dev
  libspdlog-dev libfmt-dev libcli11-dev libssl-dev
  # nvidia-smi -q -x reports (host discovery, src/agent/nvidia_smi.cc)
  libexpat1-dev
  # `tessera up --netns` (network namespaces, veths, a bridge: docs/netns.md) and its tests
  iproute2
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev sqlite3
  # example workloads and the Python SDK
  python3 python3-torch
  # serving benchmark: the reference proxies beside `tessera router` (bench/serving)
  haproxy nginx
  # HA heads: etcd 3.4 as the replicated store (tessera head --store etcd://..., src/store)
  etcd-server
  # dashboard tests: a real headless browser, driven from Node (playwright-core, below)
  chromium nodejs
  # the Debian package (packaging/): dpkg-shlibdeps for cpack's Depends, systemd-analyze to
  # verify the units in its test
  dpkg-dev systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# playwright-core (the browser tests' driver; it downloads no browser) at the version that
# package-lock.json pins. Skipped when node_modules already holds that version.
cd "$(dirname "$0")/.."
if ! node -e 'const l = require("./package-lock.json").packages["node_modules/playwright-core"];
    process.exit(require("./node_modules/playwright-core/package.json").version === l.version ? 0 : 1)' \
    2>/dev/null; then
  echo "setup: npm ci (playwright-core)"
  npm ci --no-audit --no-fund --loglevel=error
fi
