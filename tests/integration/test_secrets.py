"""Secrets (issue 33, part 2; docs/security.md "Secrets"), tested as an attacker would try to
read one: a Secret of team-a, and a job of team-a whose workers get its value as DB_PASSWORD
(each prints the value's SHA-256, so the test sees that they got it without the value reaching
any log). Then every route that could show the value is tried, and the literal value must be in
none: get, describe, -o json and -o yaml of the Secret and of the job, list and watch streams
(also while the value changes), events, the audit log (API and file), the dashboard's API calls,
`tessera logs` of another job, a user of team-b (403; a team-b job naming the Secret waits), a
`view` user, the certificate of a host that runs none of the job's workers (its own assignments
lack the value; the job's hosts' are refused to it), and every file of the state directory but
the store itself (which holds the Secret, as etcd holds Kubernetes' without encryption at rest:
it must be 0600 in a 0700 directory). A real head and agents (`tessera up`) on ports from 0.

The value is random per run; every failure prints it with its seed (TESSERA_SECRETS_SEED=N
replays a run's value).
"""
import hashlib
import json
import os
import random
import ssl
import threading
import unittest
import urllib.error
import urllib.request

from test_cluster import Client, Cluster, job, wait_for

NS_A, NS_B = "team-a", "team-b"
HASH_COMMAND = ["sh", "-c",
                'echo "hash=$(printf %s "$DB_PASSWORD" | sha256sum | cut -c1-64)"; sleep 600']


def secret(name, namespace, data):
    return {"apiVersion": "tessera/v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace}, "data": data}


def secret_job(name, namespace, secret_name="db", key="password", command=None):
    doc = job(name, command or HASH_COMMAND, slices=1)
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["template"]["env"] = {
        "STEPS": "5", "DB_PASSWORD": {"valueFrom": {"secret": secret_name, "key": key}}}
    return doc


class SecretsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.seed = int(os.environ.get("TESSERA_SECRETS_SEED") or random.SystemRandom().getrandbits(32))
        rng = random.Random(cls.seed)
        cls.value = "tsx-%032x" % rng.getrandbits(128)
        cls.second = "tsx2-%032x" % rng.getrandbits(128)
        cls.c = Cluster()
        cls.c.up()
        cls.configs = {}
        for name, role, ns in (("ann", "edit", NS_A), ("vera", "view", NS_A),
                               ("bob", "edit", NS_B)):
            path = os.path.join(cls.c.dir, name + ".json")
            cls.c.cli("user", "create", name, "--role", role, "--namespace", ns, "--out", path)
            cls.configs[name] = path
        cls.ann = Client.from_config(cls.configs["ann"])
        cls.bob = Client.from_config(cls.configs["bob"])
        # ann applies the Secret from a file with the CLI, as a user would.
        path = os.path.join(cls.c.dir, "db-secret.json")
        with open(path, "w") as f:
            json.dump(secret("db", NS_A, {"password": cls.value, "user": "ann"}), f)
        cls.c.cli("apply", "-f", path, "--config", cls.configs["ann"])
        cls.ann.apply(secret_job("uses", NS_A))
        # A job whose Secret does not exist yet: it waits, and starts once it is applied.
        cls.ann.apply(secret_job("later", NS_A, secret_name="later-db", key="token",
                                 command=["sh", "-c", "echo other-job-output; sleep 600"]))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def absent(self, text, where):
        """The literal value (and the second one) is not in `text`."""
        for v in (self.value, self.second):
            self.assertNotIn(v, text, "a secret value (seed %d: %s) leaked through %s" % (
                self.seed, v, where))

    def cli(self, *args, who=None):
        extra = ("--config", self.configs[who]) if who else ()
        return self.c.cli(*args, *extra).stdout

    def token(self, who):
        with open(self.configs[who]) as f:
            return json.load(f)["token"]

    def job_status(self, name, namespace=NS_A):
        return self.c.client.request("GET", "/api/v1/jobs/%s?namespace=%s" % (name, namespace))[
            "status"]

    def wait_running(self, name):
        wait_for(name + " Running", lambda: self.job_status(name)["phase"] == "Running",
                 timeout=90)

    def hosts_of(self, name):
        return sorted(h for s in self.job_status(name)["placement"] for h in s["hosts"])

    def test_the_jobs_workers_get_the_value(self):
        self.wait_running("uses")
        want = "hash=" + hashlib.sha256(self.value.encode()).hexdigest()
        for worker in ("0", "3"):
            out = wait_for("worker %s's hash line" % worker, lambda w=worker: (lambda o: o if "hash=" in o else None)(
                self.cli("logs", "job", "uses", "-n", NS_A, "--worker", w)))
            self.assertIn(want, out, "worker %s did not get the value (seed %d)" % (worker,
                                                                                      self.seed))
            self.absent(out, "the job's own logs")

    def test_get_describe_and_output_formats_show_keys_and_lengths_only(self):
        self.wait_running("uses")
        # The CLI as the cluster admin and as a view user of team-a; every format.
        for who in (None, "vera"):
            table = self.cli("get", "secrets", "-n", NS_A, who=who)
            self.assertRegex(table, r"db\s+Opaque\s+2\s+password,user")
            self.absent(table, "get secrets as %s" % who)
            for fmt in ("json", "yaml"):
                out = self.cli("get", "secret", "db", "-n", NS_A, "-o", fmt, who=who)
                self.absent(out, "get secret -o %s as %s" % (fmt, who))
                self.assertIn("<redacted: %d bytes>" % len(self.value), out)
            described = self.cli("describe", "secret", "db", "-n", NS_A, who=who)
            self.absent(described, "describe secret as %s" % who)
            self.assertRegex(described, r"password:\s+%d bytes" % len(self.value))
        for fmt in ("json", "yaml"):
            out = self.cli("get", "job", "uses", "-n", NS_A, "-o", fmt, who="ann")
            self.absent(out, "get job -o %s" % fmt)
            self.assertIn("valueFrom", out, "the job keeps the reference")
        self.absent(self.cli("describe", "job", "uses", "-n", NS_A), "describe job")
        self.absent(self.cli("get", "secrets", "-A"), "get secrets -A")
        self.absent(self.cli("get", "jobs", "-A", "-o", "json"), "get jobs -A -o json")
        # The API as ann (edit) too: one object and the list.
        for path in ("/api/v1/secrets/db?namespace=team-a", "/api/v1/secrets?namespace=team-a"):
            code, body = self.c.request("GET", path, token=self.token("ann"))
            self.assertEqual(code, 200, body)
            self.absent(json.dumps(body), "GET %s as ann" % path)

    def test_a_waiting_job_names_the_missing_secret_then_starts_once_it_exists(self):
        status = wait_for("later waits for its Secret", lambda: (
            lambda s: s if s.get("reason") == "SecretNotFound" else None)(
                self.job_status("later")))
        self.assertIn("Secret later-db does not exist in namespace team-a", status["message"])
        explained = self.cli("explain", "job", "later", "-n", NS_A)
        self.assertIn("SecretNotFound", explained)
        self.assertIn("apply a Secret named later-db", explained)
        p = self.c.cli("wait", "job", "later", "-n", NS_A, "--for", "phase=Running",
                       "--timeout", "1s", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SecretNotFound", p.stdout + p.stderr)
        self.ann.apply(secret("later-db", NS_A, {"token": self.second}))
        self.wait_running("later")
        # Another job's logs: its own output, nothing of the Secrets.
        out = wait_for("later's output", lambda: (lambda o: o if "other-job-output" in o else None)(
            self.cli("logs", "job", "later", "-n", NS_A)))
        self.absent(out, "tessera logs of another job")

    def test_a_user_of_another_namespace_is_refused_and_its_job_cannot_use_the_secret(self):
        token = self.token("bob")
        for method, path in (("GET", "/api/v1/secrets/db?namespace=team-a"),
                             ("GET", "/api/v1/secrets?namespace=team-a"),
                             ("GET", "/api/v1/secrets?watch=true&namespace=team-a"),
                             ("DELETE", "/api/v1/secrets/db?namespace=team-a")):
            code, body = self.c.request(method, path, token=token)
            self.assertEqual(code, 403, body)
            self.assertIn("user 'bob'", body["error"])
            self.assertIn("Secret", body["error"])
            self.absent(json.dumps(body), "a 403 to bob")
        code, body = self.c.request("POST", "/api/v1/apply", secret("db", NS_A, {"password": "x"}),
                                    token=token)
        self.assertEqual(code, 403, body)
        # A job of team-b naming "db" reads team-b's "db", which does not exist: it waits.
        self.bob.apply(secret_job("steal", NS_B))
        status = wait_for("steal waits", lambda: (
            lambda s: s if s.get("reason") == "SecretNotFound" else None)(
                self.job_status("steal", NS_B)))
        self.assertIn("namespace team-b", status["message"])
        self.assertEqual(status["phase"], "Pending")
        # A team-a document from bob is refused outright.
        code, body = self.c.request("POST", "/api/v1/apply", secret_job("steal2", NS_A),
                                    token=token)
        self.assertEqual(code, 403, body)

    def test_a_view_user_lists_names_but_may_not_write(self):
        token = self.token("vera")
        code, body = self.c.request("GET", "/api/v1/secrets?namespace=team-a", token=token)
        self.assertEqual(code, 200, body)
        self.assertIn("db", [s["metadata"]["name"] for s in body["items"]])
        self.absent(json.dumps(body), "a view user's list")
        for method, path, doc in (("POST", "/api/v1/apply", secret("db", NS_A, {"password": "x"})),
                                  ("DELETE", "/api/v1/secrets/db?namespace=team-a", None)):
            code, body = self.c.request(method, path, doc, token=token)
            self.assertEqual(code, 403, body)
            self.assertIn("needs role edit in namespace 'team-a'", body["error"])

    def test_watch_streams_and_events_carry_no_value_even_when_it_changes(self):
        self.wait_running("uses")
        lines = {"secrets": [], "jobs": [], "events": []}
        done = threading.Event()

        def follow(kind):
            req = urllib.request.Request(
                "%s/api/v1/%s?watch=true&namespace=team-a" % (self.c.url, kind))
            req.add_header("Authorization", "Bearer " + self.c.token)
            # Each reader ends by itself once the test is done (or after 10 s without a
            # line): closing a stream from this thread would wait for its blocked read.
            r = urllib.request.urlopen(req, context=self.c.ssl_context(), timeout=10)
            try:
                for line in r:
                    lines[kind].append(line.decode())
                    if done.is_set():
                        break
            except (OSError, ValueError):
                pass
            finally:
                r.close()

        threads = [threading.Thread(target=follow, args=(k,), daemon=True) for k in lines]
        for t in threads:
            t.start()
        wait_for("the watches' first lines", lambda: all(lines[k] for k in ("secrets", "jobs")))
        # A new value (the key kept, so the running job may keep going): the MODIFIED change
        # and the event say so without it.
        self.ann.apply(secret("db", NS_A, {"password": self.second, "user": "ann"}))
        wait_for("MODIFIED on the secrets watch",
                 lambda: any('"MODIFIED"' in l for l in lines["secrets"]), timeout=20)
        wait_for("the Configured event of secret/db in team-a",
                 lambda: any("Configured" in l and "secret/db" in l for l in lines["events"]),
                 timeout=20)
        done.set()
        for kind, got in lines.items():
            self.absent("".join(got), "the %s watch stream" % kind)
        self.assertIn("<redacted: %d bytes>" % len(self.second), "".join(lines["secrets"]))
        self.absent(self.cli("get", "events", "-n", NS_A), "tessera get events")
        self.absent(json.dumps(self.c.client.request(
            "GET", "/api/v1/events?allNamespaces=true")), "the events API")
        # Restore the first value for the other tests' hash check (the workers keep theirs).
        self.ann.apply(secret("db", NS_A, {"password": self.value, "user": "ann"}))

    def test_a_secret_running_workers_read_cannot_be_deleted(self):
        self.wait_running("uses")
        p = self.c.cli("delete", "secret", "db", "-n", NS_A, "--config", self.configs["ann"],
                       check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("trainjob/uses", p.stderr)
        self.absent(p.stdout + p.stderr, "a refused delete")

    def test_the_audit_log_and_the_dashboards_calls_hold_no_value(self):
        self.wait_running("uses")
        entries = self.cli("audit", "-o", "json", "--limit", "10000")
        self.absent(entries, "tessera audit")
        self.assertTrue([e for e in json.loads(entries)["items"]
                         if e["kind"] == "Secret" and e["user"] == "ann" and e["verb"] == "apply"])
        with open(os.path.join(self.c.state, "audit.log")) as f:
            self.absent(f.read(), "audit.log")
        # What the dashboard asks for (web/app.js), as the cluster admin and as ann.
        for token in (self.c.token, self.token("ann")):
            for path in ("/api/v1/whoami", "/api/v1/jobs", "/api/v1/services", "/api/v1/events",
                         "/api/v1/jobs?namespace=team-a", "/api/v1/events?namespace=team-a",
                         "/api/v1/jobs?allNamespaces=true", "/api/v1/hosts",
                         "/api/v1/clusterqueues", "/api/v1/localqueues?namespace=team-a",
                         "/api/v1/secrets?namespace=team-a", "/api/v1/jobs/uses?namespace=team-a",
                         "/metrics", "/"):
                code, body = self.c.request("GET", path, token=token,
                                            content_type="application/json")
                self.absent(json.dumps(body), "GET " + path)

    def test_a_host_that_runs_none_of_the_jobs_workers_never_gets_the_value(self):
        self.wait_running("uses")
        with open(os.path.join(self.c.state, "join.token")) as f:
            join = f.read().strip()
        job_hosts = self.hosts_of("uses")
        later_hosts = set(self.hosts_of("later")) if self.job_status("later").get(
            "placement") else set()
        others = sorted(h["metadata"]["name"] for h in self.c.client.list("hosts")
                        if h["metadata"]["name"] not in job_hosts)
        self.assertTrue(others)

        def assignments(of, cert_host):
            agent = os.path.join(self.c.state, "agents", cert_host)
            ctx = ssl.create_default_context(cafile=self.c.ca_file)
            ctx.load_cert_chain(os.path.join(agent, "host.pem"))
            with open(os.path.join(agent, "credential")) as f:
                credential = f.read().strip()
            req = urllib.request.Request("%s/api/v1/agents/%s/assignments" % (self.c.url, of))
            req.add_header("Authorization", "Bearer " + join)
            req.add_header("X-Tessera-Host-Credential", credential)
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        # The control: the job's own host reads the value in its assignment.
        code, own = assignments(job_hosts[0], job_hosts[0])
        self.assertEqual(code, 200, own)
        self.assertIn(self.value, own, "the job's host must get the value (seed %d)" % self.seed)
        for other in others:
            code, body = assignments(other, other)
            self.assertEqual(code, 200, body)
            if other not in later_hosts:
                self.absent(body, "the assignments of host %s, which runs no secret job" % other)
            else:
                self.assertNotIn(self.value, body, "host %s runs another job" % other)
            # Its certificate asking for a host of the job: refused.
            code, body = assignments(job_hosts[0], other)
            self.assertEqual(code, 403, body)
            self.absent(body, "a refused assignments call")

    def test_nothing_on_disk_but_the_private_store_holds_the_value(self):
        self.wait_running("uses")
        store = os.path.join(self.c.state, "tessera.db")
        self.assertEqual(os.stat(self.c.state).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(store).st_mode & 0o777, 0o600)
        scanned = 0
        for root, _, files in os.walk(self.c.state):
            for name in files:
                path = os.path.join(root, name)
                if path.startswith(store) or not os.path.isfile(path):
                    continue  # the store (and its -wal, -shm) keeps the Secret itself
                with open(path, "rb") as f:
                    data = f.read()
                scanned += 1
                for v in (self.value, self.second):
                    self.assertNotIn(v.encode(), data, "secret value (seed %d) in %s" % (
                        self.seed, path))
        self.assertGreater(scanned, 10, "the head's and agents' logs and state were scanned")


if __name__ == "__main__":
    unittest.main()
