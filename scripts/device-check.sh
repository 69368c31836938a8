#!/usr/bin/env bash
# Device check for a machine with NVIDIA GPUs (docs/deploy.md, "Checking a GPU node"): asks
# nvidia-smi what GPUs the machine has, starts a head and an agent that discovers them
# (--devices nvidia) on loopback, runs a one-worker job that prints CUDA_VISIBLE_DEVICES and
# its NCCL and rendezvous environment (and what PyTorch sees, when it is installed), prints
# what each of them saw, and stops them. Nothing is installed or left behind: the head's and
# the agent's state live in a scratch directory that is removed at the end. Not part of CI
# (there is no GPU there); tests/integration/test_device_check.py runs it against a recorded
# nvidia-smi report.
#
#   scripts/device-check.sh
#
# Environment:
#   TESSERA_BIN  the tessera binary (default: this checkout's build/release/bin/tessera, then
#                build/dev/bin/tessera, then tessera on PATH, as the Debian package installs it)
#   NVIDIA_SMI   the nvidia-smi to run, by the agent too (default: nvidia-smi on PATH); any
#                program that prints an `nvidia-smi -q -x` report will do
#   GENERATION, TOPOLOGY  the TPU-shaped layout the GPU host registers with (the head places
#                jobs on TPU shapes only: docs/discovery.md, "Not yet"); default v6e and the
#                one-host shape with as many chips as there are GPUs: 1x1, 2x2 or 2x4
#   TIMEOUT      how long the agent's registration and the job may take, seconds (default 120)
#   KEEP=1       keep the scratch directory (the head's and the agent's logs) and print it
# Exit status: 0 when the agent registered every GPU nvidia-smi lists and the job succeeded.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
TIMEOUT=${TIMEOUT:-120}
die() {
  echo "device-check: $*" >&2
  exit 1
}

if [ -n "${TESSERA_BIN:-}" ]; then
  T=$TESSERA_BIN
elif [ -x "$here/build/release/bin/tessera" ]; then
  T=$here/build/release/bin/tessera
elif [ -x "$here/build/dev/bin/tessera" ]; then
  T=$here/build/dev/bin/tessera
elif command -v tessera >/dev/null; then
  T=$(command -v tessera)
else
  die "no tessera binary: build one (cmake --build --preset release), install the package, or set TESSERA_BIN"
fi
[ -x "$T" ] || die "TESSERA_BIN: $T is not an executable file"
command -v "$NVIDIA_SMI" >/dev/null || die "NVIDIA_SMI: '$NVIDIA_SMI' is not on PATH or not executable"
# The agent runs it by this path, whatever its working directory.
NVIDIA_SMI=$(command -v "$NVIDIA_SMI")
[[ "$NVIDIA_SMI" == /* ]] || NVIDIA_SMI=$PWD/$NVIDIA_SMI

scratch=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")
head_pid=""
agent_pid=""
# Stops what this script started (SIGTERM; the agent stops its workers first), by pid.
cleanup() {
  local pid
  for pid in $agent_pid $head_pid; do
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "${KEEP:-0}" = 1 ]; then
    echo "device-check: kept $scratch (head.log, agent.log, head/, agent/)"
  else
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
# Polls `$@` every 0.2 s until it succeeds, for at most TIMEOUT seconds; fails early when the
# process `pid` has exited.
wait_for() {
  local what=$1 pid=$2
  shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || return 2
    [ "$SECONDS" -lt "$deadline" ] || die "$what: not within ${TIMEOUT} s"
    sleep 0.2
  done
}

echo "== nvidia-smi ($NVIDIA_SMI -q -x)"
"$NVIDIA_SMI" -q -x >"$scratch/nvidia-smi.xml" 2>"$scratch/nvidia-smi.err" ||
  die "$NVIDIA_SMI -q -x failed: $(head -c 500 "$scratch/nvidia-smi.err")"
gpus=$(grep -c '<gpu id=' "$scratch/nvidia-smi.xml" || true)
[ "$gpus" -gt 0 ] || die "nvidia-smi lists no GPU"
mapfile -t smi_uuids < <(sed -n 's:.*<uuid>\(.*\)</uuid>.*:\1:p' "$scratch/nvidia-smi.xml")
mapfile -t names < <(sed -n 's:.*<product_name>\(.*\)</product_name>.*:\1:p' "$scratch/nvidia-smi.xml")
for i in "${!smi_uuids[@]}"; do echo "  GPU $i: ${smi_uuids[$i]} ${names[$i]:-}"; done

GENERATION=${GENERATION:-v6e}
if [ -z "${TOPOLOGY:-}" ]; then
  case "$gpus" in
    1) TOPOLOGY=1x1 ;;
    4) TOPOLOGY=2x2 ;;
    8) TOPOLOGY=2x4 ;;
    *) die "$gpus GPUs: no one-host $GENERATION shape has $gpus chips; set GENERATION and TOPOLOGY (\`$T topology --help\`)" ;;
  esac
fi

echo "== tessera head (state in $scratch/head)"
"$T" head --state-dir "$scratch/head" --port 0 >"$scratch/head.log" 2>&1 &
head_pid=$!
wait_for "the head's head.json" "$head_pid" test -s "$scratch/head/head.json" ||
  die "the head exited: $(cat "$scratch/head.log")"
port=$(sed -n 's/.*"port": *\([0-9]*\).*/\1/p' "$scratch/head/head.json")
[ -n "$port" ] || die "no port in $scratch/head/head.json"
# The CLI against this head (its address and admin token are in its state directory).
c() { "$T" "$@" --state-dir "$scratch/head"; }
echo "  listening on 127.0.0.1:$port"

echo "== tessera agent --devices nvidia --generation $GENERATION --topology $TOPOLOGY"
"$T" agent --head "https://127.0.0.1:$port" --ca-file "$scratch/head/ca.crt" \
  --join-token-file "$scratch/head/join.token" \
  --state-dir "$scratch/agent" --name device-check --devices nvidia --nvidia-smi "$NVIDIA_SMI" \
  --generation "$GENERATION" --slice device-check --topology "$TOPOLOGY" --worker 0 \
  >"$scratch/agent.log" 2>&1 &
agent_pid=$!
host_registered() { c get host device-check -o json; }
wait_for "the agent's registration" "$agent_pid" host_registered ||
  die "the agent exited: $(cat "$scratch/agent.log")"
grep 'agent.discovery' "$scratch/agent.log" | sed 's/^/  /' || true
c get host device-check -o json >"$scratch/host.json"
# The GPUs the head keeps for the host (spec.discovered.gpus), one "uuid memory fabric" line
# each; read without a JSON tool: the object is printed one key per line.
mapfile -t head_uuids < <(sed -n 's/.*"uuid": *"\([^"]*\)".*/\1/p' "$scratch/host.json")
source=$(sed -n 's/.*"source": *"\([^"]*\)".*/\1/p' "$scratch/host.json" | head -n 1)
echo "  the head shows host device-check: source ${source:-none}, ${#head_uuids[@]} GPUs"
for u in "${head_uuids[@]}"; do echo "    $u"; done

echo "== a job on the GPU host: its environment"
cat >"$scratch/job.sh" <<'EOF'
#!/bin/sh
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"
echo "NCCL variables: $(env | grep -c '^NCCL_')"
env | grep -E '^(NCCL_|CUDA_|MASTER_ADDR=|MASTER_PORT=|RANK=|WORLD_SIZE=|LOCAL_RANK=)' | sort
# What CUDA shows PyTorch, with the first python3 that has it (PATH's, then Debian's).
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch' 2>/dev/null; then
    timeout 120 "$py" -c 'import torch; print("torch.cuda.device_count()=%d" % torch.cuda.device_count())' ||
      echo "torch: failed"
    exit 0
  fi
done
echo "torch: not installed"
EOF
chmod 0755 "$scratch/job.sh"
cat >"$scratch/job.yaml" <<EOF
apiVersion: tessera/v1
kind: TrainJob
metadata:
  name: device-check
spec:
  accelerator: $GENERATION
  topology: $TOPOLOGY
  slices: 1
  template:
    command: [/bin/sh, $scratch/job.sh]
EOF
c apply -f "$scratch/job.yaml" | sed 's/^/  /'
if ! c wait job device-check --for phase=Succeeded --timeout "${TIMEOUT}s" >/dev/null; then
  c describe job device-check >&2 || true
  die "the job did not succeed (agent log: $(tail -n 20 "$scratch/agent.log"))"
fi
c logs job device-check --worker 0 >"$scratch/job.log"
sed 's/^/  /' "$scratch/job.log"

echo "== summary"
echo "  nvidia-smi:  $gpus GPUs"
echo "  agent:       ${#head_uuids[@]} GPUs registered (source ${source:-none}), as $GENERATION $TOPOLOGY"
cuda=$(sed -n 's/^CUDA_VISIBLE_DEVICES=//p' "$scratch/job.log")
echo "  job:         CUDA_VISIBLE_DEVICES=$cuda, $(sed -n 's/^NCCL variables: //p' "$scratch/job.log") NCCL variables"
if [ "$cuda" = "<unset>" ]; then
  echo "  note:        tessera sets no CUDA_VISIBLE_DEVICES: the job's processes see every GPU of the host"
fi
missing=()
for u in "${smi_uuids[@]}"; do
  [[ " ${head_uuids[*]} " == *" $u "* ]] || missing+=("$u")
done
[ "$source" = nvidia-smi ] || die "the head's host says source '${source}', not nvidia-smi"
[ ${#missing[@]} -eq 0 ] || die "GPUs nvidia-smi lists but the head does not: ${missing[*]}"
[ "${#head_uuids[@]}" -eq "$gpus" ] || die "the head shows ${#head_uuids[@]} GPUs, nvidia-smi $gpus"
echo "device-check: ok"
