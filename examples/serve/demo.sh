#!/usr/bin/env bash
# One command: a local emulated cluster (two v6e 4x4 slices), the example model server deployed
# on it as a Service of 2 replicas (4 tensor-parallel processes each), one streamed completion
# printed token by token, then everything torn down.
#   examples/serve/demo.sh [PROMPT]
# Uses the head's Service API (docs/serving.md) with the admin token of the cluster it starts;
# sends the request through `tessera router` when `tessera up` started one (.tessera/router.json),
# else straight to the first ready replica's leader.
set -euo pipefail
cd "$(dirname "$0")/../.."
PROMPT=${1:-"Tessera serves models on slices."}
T=${TESSERA_BIN:-./build/release/bin/tessera}
STATE=.tessera-serve-demo
PY=/usr/bin/python3
if [ ! -x "$T" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target tessera
fi
trap '$T down --state-dir "$STATE" --purge >/dev/null 2>&1 || true' EXIT
$T down --state-dir "$STATE" --purge >/dev/null 2>&1 || true

$T up --generation v6e --topology 4x4 --slices 2 --state-dir "$STATE"
$T apply -f examples/serve/service.yaml --state-dir "$STATE"

HEAD="https://127.0.0.1:$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$STATE/head.json")"
TOKEN=$(cat "$STATE/admin.token")
# The address of a ready endpoint, once the Service has one (3 minutes at most).
endpoint() {
  curl -sf --cacert "$STATE/ca.crt" -H "Authorization: Bearer $TOKEN" "$HEAD/api/v1/services/llm" | $PY -c '
import json, sys
s = json.load(sys.stdin).get("status", {})
ready = [e for e in s.get("endpoints", []) if e.get("ready")]
print("%s:%s" % (ready[0]["address"], ready[0]["port"]) if ready else "")'
}
echo "== waiting for a ready replica"
for _ in $(seq 900); do
  ADDR=$(endpoint || true)
  [ -n "$ADDR" ] && break
  sleep 0.2
done
[ -n "$ADDR" ] || { echo "no replica became ready; tessera describe service llm:" >&2; \
  $T describe service llm --state-dir "$STATE" >&2 || true; exit 1; }
URL="http://$ADDR"
CACERT=()
if [ -f "$STATE/router.json" ]; then
  # `tessera up`'s router serves HTTPS with a certificate from the cluster CA.
  URL=$($PY -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%s://%s:%s" % (r.get("scheme", "http"), r["address"], r["port"]))' "$STATE/router.json")
  CACERT=(--cacert "$STATE/ca.crt")
  echo "== through the router at $URL"
else
  echo "== straight to a replica's leader at $URL"
fi
BODY=$($PY -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 64, "temperature": 0, "stream": True}))' "$PROMPT")
echo "prompt: $PROMPT"
printf 'completion: '
# -N: no buffering, so each token prints as its chunk arrives.
curl -sN "${CACERT[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' -d "$BODY" | $PY -u -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("data: ") or line == "data: [DONE]":
        continue
    for c in json.loads(line[6:]).get("choices", []):
        sys.stdout.write(c["text"]); sys.stdout.flush()
print()'
$T down --state-dir "$STATE" --purge
trap - EXIT
