"""A head-managed disaggregated Service, live (issue 18): `tessera up` (a head, two agents of one
v6e 2x4 slice each, the router), a Service with a prefill and a decode role of the example model
server (examples/serve, real KV handoffs over TCP), requests through the router taking the
handoff path; the outputs equal a local prefill's, and the router's handoff counts, time to
first token and time per output token reach the head and `tessera describe service`. The bad
inputs of a disaggregated Service get 422 naming the field.

Real processes because what is tested is the whole path the unit tests cover piece by piece:
the head's placement and environment (TESSERA_KV_*), its endpoints with their slices, the
router's pairing and token counting, decode's handoff to prefill, and the load reports back.
The pairing rules, the KV format and the manifest checks are unit tests
(src/proxy/disagg_pairing_test.cc, token_counter_test.cc, examples/serve/test_kvwire.py,
src/codec/service_disagg_test.cc). About 30 s, most of it the two servers importing torch.

The binary comes from $TESSERA_BIN.
"""
import http.client
import json
import os
import unittest

from test_cluster import PYTHON, REPO, TESSERA, wait_for
from test_serving_e2e import ServingCluster

NAME = "pd"
SERVER = os.path.join(REPO, "examples", "serve", "server.py")
# Longer than the threshold (8 tokens): decode hands it to the prefill role.
PROMPT = "A prompt long enough to be prefilled by the prefill role, not by decode."
MAX_TOKENS = 12


def role(name, kind):
    return {"name": name, "disaggregation": kind, "accelerator": "v6e", "topology": "2x4",
            "replicas": 1, "command": [PYTHON, SERVER], "workingDir": REPO,
            "maxOngoingRequests": 4,
            "readiness": {"path": "/healthz", "startupGrace": "120s", "period": "500ms",
                          "timeout": "5s"},
            "terminationGracePeriod": "5s"}


def service(**spec_changes):
    spec = {"kvTransfer": {"threshold": 8, "timeout": "5s", "hold": "10s"},
            "roles": [role("decode", "decode"), role("prefill", "prefill")]}
    spec.update(spec_changes)
    return {"apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": NAME},
            "spec": spec}


def complete(connect, path, stream=False):
    """(text, X-Tessera-Prefilled, token events) of one completion, same prompt and seed;
    `connect(timeout)` gives the connection (a replica's plain HTTP, the router's HTTPS)."""
    conn = connect(120)
    try:
        body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 1, "seed": 5,
                "stream": stream}
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read().decode()
        if r.status != 200:
            raise AssertionError("HTTP %d: %s" % (r.status, raw))
        prefilled = r.getheader("X-Tessera-Prefilled")
        if not stream:
            return json.loads(raw)["choices"][0]["text"], prefilled, None
        events = [line[len("data: "):] for line in raw.splitlines() if line.startswith("data: ")]
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        return text, prefilled, len([c for c in chunks if c["choices"]])
    finally:
        conn.close()


@unittest.skipUnless(os.path.exists(TESSERA), "needs the tessera binary ($TESSERA_BIN)")
class DisaggLiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = ServingCluster()
        cls.c.up(slices=2)

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def get(self):
        status, body = self.c.request("GET", "/api/v1/services/" + NAME)
        return body if status == 200 else None

    def roles(self):
        svc = self.get()
        return {r["name"]: r for r in svc["status"]["roles"]} if svc else {}

    def test_bad_disaggregated_services_get_422_naming_the_field(self):
        one_role = service()
        del one_role["spec"]["roles"][1]["disaggregation"]
        cases = [
            (one_role, "spec.roles[0].disaggregation"),
            (service(kvTransfer={"threshold": -1}), "spec.kvTransfer.threshold"),
            (service(kvTransfer={"timeout": "0s"}), "spec.kvTransfer.timeout"),
            (service(kvTransfer={"hold": "0s"}), "spec.kvTransfer.hold"),
        ]
        for doc, field in cases:
            status, body = self.c.request("POST", "/api/v1/apply", doc)
            self.assertEqual(status, 422, body)
            self.assertEqual(body.get("field"), field, body)
            self.assertIn(field + ":", body.get("error", ""), body)
        self.assertIsNone(self.get(), "nothing was created")

    def test_requests_through_the_router_take_the_handoff_path(self):
        status, body = self.c.request("POST", "/api/v1/apply", service())
        self.assertIn(status, (200, 201), body)
        self.addCleanup(self.c.request, "DELETE", "/api/v1/services/" + NAME)

        def ready():
            svc = self.get()
            eps = [e for e in svc["status"]["endpoints"] if e["ready"]] if svc else []
            return {e["role"]: e for e in eps} if len(eps) == 2 else None
        endpoints = wait_for("both roles ready", ready, timeout=150, interval=0.2)
        decode = endpoints["decode"]
        self.assertEqual(decode["address"], "127.0.0.1")

        # The reference: the decode replica itself, with no prefill replica named, prefills
        # locally.
        want, source, _ = complete(
            lambda timeout: http.client.HTTPSConnection(
                "127.0.0.1", decode["port"], timeout=timeout, context=self.c.ssl_context()),
            "/v1/completions")
        self.assertEqual(source, "local")

        # Through the router: decode hands the prompt off (once the router's view has the
        # prefill endpoint: the first answers may still be local).
        router = self.c.router.connection  # HTTPS verified against the cluster CA
        path = "/services/%s/v1/completions" % NAME
        got = wait_for("a request prefilled by the prefill role",
                       lambda: (lambda r: r if r[1] == "remote" else None)(complete(router, path)),
                       timeout=30, interval=0.2)
        self.assertEqual(got[0], want, "a transferred KV cache gives a local prefill's tokens")
        text, source, tokens = complete(router, path, stream=True)
        self.assertEqual((text, source, tokens), (want, "remote", MAX_TOKENS))

        # The router's counts reach the head: handoffs by the decode role, TTFT of the handed-off
        # stream by the prefill role, output tokens and TPOT by the decode role.
        def reported():
            roles = self.roles()
            d = roles.get("decode", {}).get("traffic", {})
            p = roles.get("prefill", {}).get("traffic", {})
            done = (d.get("disagg", {}).get("prefilledRemote", 0) >= 2 and
                    d.get("tpotCount", 0) >= 1 and p.get("ttftCount", 0) >= 1)
            return (d, p) if done else None
        d, p = wait_for("the router's report at the head", reported, timeout=20, interval=0.2)
        self.assertEqual(d["disagg"].get("fallbacks", 0), 0, d)
        self.assertEqual(d["outputTokens"], MAX_TOKENS, d)
        self.assertGreater(d["tpotSecondsSum"], 0, d)
        # Each role on its own slice: every pairing was across slices.
        self.assertGreaterEqual(d["disagg"]["pairedOtherSlice"], 2, d)
        self.assertEqual(d["disagg"].get("pairedSameSlice", 0), 0, d)

        out = self.c.cli("describe", "service", NAME).stdout
        self.assertIn("TPOT-MEAN", out)
        rows = {line.split()[0]: line for line in out.splitlines()
                if line.strip().startswith(("decode ", "prefill "))}
        # decode: no stream of its own prefill (TTFT -), its TPOT, the mean latency; prefill:
        # the TTFT of the handed-off stream, no TPOT, no request of its own.
        self.assertRegex(rows["decode"], r" -\s+\d+\.\d ms\s+\d+\.\d ms$", out)
        self.assertRegex(rows["prefill"], r" \d+\.\d ms\s+-\s+-$", out)
        self.assertRegex(out, r"Handoffs: [1-9]\d* prefilled remotely")
        self.assertIn("0 fallbacks to local prefill", out)


if __name__ == "__main__":
    unittest.main()
