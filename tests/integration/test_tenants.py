"""Users, roles and the audit log, tested as an attacker would try them (issue 33, section 3:
the parts about users; docs/security.md "Users and roles"): a `view` user writing; a user of
namespace A reading, changing or deleting what lives in B, or submitting to B's LocalQueue; a
revoked user. Each must be a 403 that names the user, the verb, the object and the role that
would allow it, and must change nothing. A real head and agents (`tessera up`) on ports from 0.
"""
import json
import os
import unittest

from test_cluster import Client, Cluster, job, wait_for


class TenantsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        cls.c.up()
        cls.tokens = {}
        for name, role, ns in (("vera", "view", "default"), ("eddie", "edit", "default"),
                               ("ann", "edit", "team-a"), ("ada", "admin", "team-a"),
                               ("bob", "edit", "default")):
            path = os.path.join(cls.c.dir, name + ".json")
            cls.c.cli("user", "create", name, "--role", role, "--namespace", ns, "--out", path)
            with open(path) as f:
                cls.tokens[name] = json.load(f)["token"]
        # A LocalQueue of the namespace "default" (namespace B for the users of team-a).
        cls.c.client.apply([
            {"apiVersion": "tessera/v1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
             "spec": {"quotas": [{"generation": "v6e", "nominalQuota": 64}]}},
            {"apiVersion": "tessera/v1", "kind": "LocalQueue", "metadata": {"name": "default-lq"},
             "spec": {"clusterQueue": "cq"}},
        ])
        # A job of the namespace "default" for the others to try to reach.
        cls.c.client.apply(job("target", ["sleep", "600"], slices=1))

    @classmethod
    def tearDownClass(cls):
        cls.c.down()

    def as_user(self, name, method, path, body=None):
        return self.c.request(method, path, body, token=self.tokens[name])

    def assert_refused(self, answer, *words):
        code, body = answer
        self.assertEqual(code, 403, body)
        for word in words:
            self.assertIn(word, body["error"])

    def assert_target_unchanged(self):
        j = self.c.get_job("target")
        self.assertIsNotNone(j, "the job of namespace default was deleted")
        self.assertEqual(j["spec"]["template"]["command"], ["sleep", "600"])

    def test_the_config_file_is_private_and_the_cli_and_client_use_it(self):
        path = os.path.join(self.c.dir, "eddie.json")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path) as f:
            config = json.load(f)
        self.assertEqual(config["namespace"], "default")
        self.assertEqual(config["user"], "eddie")
        p = self.c.cli("get", "jobs", "--config", path)
        self.assertIn("target", p.stdout)
        client = Client.from_config(path)
        self.assertEqual(client.request("GET", "/api/v1/whoami")["name"], "eddie")
        self.assertIn("target", [j["metadata"]["name"] for j in client.list("jobs")])
        # The head keeps the token's hash, never the token.
        users = self.c.client.request("GET", "/api/v1/users")["items"]
        self.assertNotIn(config["token"], json.dumps(users))

    def test_the_cli_acts_in_the_config_files_namespace(self):
        ann = os.path.join(self.c.dir, "ann.json")
        # team-a's list: answered, and without default's job.
        p = self.c.cli("get", "jobs", "--config", ann, "-o", "json")
        self.assertEqual(json.loads(p.stdout)["items"], [])
        for args in (("get", "jobs", "-n", "default"), ("get", "jobs", "-A"),
                     ("get", "job", "target", "-n", "default"),
                     ("delete", "job", "target", "-n", "default")):
            p = self.c.cli(*args, "--config", ann, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn("user 'ann'", p.stderr, args)
        self.assert_target_unchanged()

    def test_a_view_user_reads_but_every_write_is_refused(self):
        self.assertEqual(self.as_user("vera", "GET", "/api/v1/jobs/target")[0], 200)
        self.assertEqual(self.as_user("vera", "GET", "/api/v1/events")[0], 200)
        self.assert_refused(self.as_user("vera", "POST", "/api/v1/jobs", job("v1", ["true"], 1)),
                            "user 'vera'", "view in namespace 'default'", "create",
                            "TrainJob default/v1", "needs role edit")
        self.assert_refused(self.as_user("vera", "POST", "/api/v1/apply", job("v2", ["true"], 1)),
                            "apply", "edit")
        self.assert_refused(self.as_user("vera", "DELETE", "/api/v1/jobs/target"),
                            "delete", "TrainJob default/target", "edit")
        self.assert_refused(self.as_user("vera", "DELETE", "/api/v1/localqueues/default-lq"),
                            "delete", "LocalQueue default/default-lq", "needs role admin")
        self.assert_refused(self.as_user("vera", "POST", "/api/v1/services/s/scale",
                                         {"replicas": 3}), "scale", "Service default/s")
        self.assertIsNone(self.c.get_job("v1"))
        self.assertIsNone(self.c.get_job("v2"))
        self.assert_target_unchanged()

    def test_a_user_of_another_namespace_can_neither_read_nor_change_nor_delete(self):
        for who in ("ann", "ada"):
            self.assert_refused(self.as_user(who, "GET", "/api/v1/jobs"),
                                "user '%s'" % who, "list", "namespace 'default'")
            self.assert_refused(self.as_user(who, "GET", "/api/v1/jobs?allNamespaces=true"),
                                "every namespace", "cluster-admin")
            self.assert_refused(self.as_user(who, "GET", "/api/v1/jobs/target"),
                                "get", "TrainJob default/target", "view in namespace 'default'")
            self.assert_refused(self.as_user(who, "GET", "/api/v1/jobs/target/logs?worker=0"),
                                "logs")
            self.assert_refused(self.as_user(who, "GET", "/api/v1/events"), "Event")
            self.assert_refused(self.as_user(who, "DELETE", "/api/v1/jobs/target"), "delete")
            changed = job("target", ["sh", "-c", "echo stolen"], slices=1)
            self.assert_refused(self.as_user(who, "POST", "/api/v1/apply", changed), "apply")
            self.assert_refused(self.as_user(who, "DELETE", "/api/v1/localqueues/default-lq"),
                                "LocalQueue default/default-lq")
            # Cluster-wide objects: only a cluster admin changes them.
            self.assert_refused(self.as_user(who, "DELETE", "/api/v1/clusterqueues/cq"),
                                "ClusterQueue cq", "cluster-admin")
            self.assert_refused(self.as_user(who, "GET", "/api/v1/hosts"), "cluster-admin")
            # Its own namespace answers, and holds nothing of default's.
            code, body = self.as_user(who, "GET", "/api/v1/jobs?namespace=team-a")
            self.assertEqual((code, body["items"]), (200, []))
            self.assertEqual(self.as_user(who, "GET", "/api/v1/jobs/target?namespace=team-a")[0],
                             404)
        self.assert_target_unchanged()

    def test_a_user_of_another_namespace_cannot_use_its_local_queue(self):
        sneaky = job("sneaky", ["true"], slices=1)
        sneaky["metadata"]["queue"] = "default-lq"
        self.assert_refused(self.as_user("ann", "POST", "/api/v1/apply", sneaky),
                            "apply", "TrainJob default/sneaky")
        # Named in its own namespace, the job is accepted there but never admitted through
        # default's queue: it waits for a LocalQueue of team-a, and says so.
        sneaky["metadata"]["namespace"] = "team-a"
        code, body = self.as_user("ann", "POST", "/api/v1/apply", sneaky)
        self.assertEqual(code, 201, body)
        self.assertIsNone(self.c.get_job("sneaky"))

        def reason():
            code, got = self.as_user("ann", "GET", "/api/v1/jobs/sneaky?namespace=team-a")
            self.assertEqual(code, 200, got)
            return got["status"].get("message", "")
        wait_for("sneaky's reason", lambda: "default-lq" in reason())
        self.assertIn("does not exist in namespace team-a", reason())
        self.assertEqual(self.as_user("ann", "GET", "/api/v1/jobs/sneaky?namespace=team-a")[1][
            "status"]["phase"], "Pending")
        self.assertEqual(self.as_user("ann", "DELETE", "/api/v1/jobs/sneaky?namespace=team-a")[0],
                         200)

    def test_a_revoked_user_is_refused_at_once(self):
        self.assertEqual(self.as_user("bob", "GET", "/api/v1/jobs")[0], 200)
        self.c.cli("user", "delete", "bob")
        self.assert_refused(self.as_user("bob", "GET", "/api/v1/jobs"), "bob", "revoked")
        self.assert_refused(self.as_user("bob", "POST", "/api/v1/jobs", job("b1", ["true"], 1)),
                            "revoked")
        self.assertIsNone(self.c.get_job("b1"))
        listed = self.c.cli("user", "list").stdout
        self.assertRegex(listed, r"bob\s+edit\s+default\s+revoked")

    def test_only_cluster_admins_manage_users_and_read_the_audit_log(self):
        for who in ("vera", "eddie", "ada"):
            self.assert_refused(self.as_user(who, "GET", "/api/v1/audit"), "AuditLog",
                                "cluster-admin")
            self.assert_refused(self.as_user(who, "POST", "/api/v1/users",
                                             {"name": "mallory", "role": "cluster-admin"}),
                                "create", "User mallory", "cluster-admin")
            self.assert_refused(self.as_user(who, "DELETE", "/api/v1/users/vera"), "delete")
        users = [u["name"] for u in self.c.client.request("GET", "/api/v1/users")["items"]]
        self.assertNotIn("mallory", users)

    def test_the_audit_log_records_accepted_and_refused_writes(self):
        self.assertEqual(self.as_user("eddie", "POST", "/api/v1/jobs",
                                      job("audited", ["true"], slices=1))[0], 201)
        self.as_user("vera", "DELETE", "/api/v1/jobs/audited")
        entries = json.loads(self.c.cli("audit", "-o", "json", "--limit", "1000").stdout)["items"]

        def find(user, verb, name, code):
            return [e for e in entries if (e["user"], e["verb"], e.get("name"), e["code"]) ==
                    (user, verb, name, code)]
        accepted = find("eddie", "create", "audited", 201)
        self.assertEqual(len(accepted), 1, entries)
        self.assertEqual((accepted[0]["kind"], accepted[0]["namespace"]), ("TrainJob", "default"))
        self.assertGreater(accepted[0]["timeMs"], 0)
        refused = find("vera", "delete", "audited", 403)
        self.assertEqual(len(refused), 1, entries)
        self.assertIn("needs role edit", refused[0]["message"])
        self.assertTrue(find("admin", "create", "vera", 201), "user creation is audited")
        # Reads are not audited.
        self.assertFalse([e for e in entries if e["verb"] in ("get", "list", "watch", "logs")])
        table = self.c.cli("audit").stdout
        self.assertRegex(table, r"eddie\s+create\s+TrainJob default/audited\s+201")
        # Kept on disk too, one JSON line each, readable by the head's user only.
        path = os.path.join(self.c.state, "audit.log")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertTrue([e for e in lines if (e["user"], e["verb"], e["name"], e["code"]) ==
                         ("vera", "delete", "audited", 403)], lines)
        self.c.request("DELETE", "/api/v1/jobs/audited")
        wait_for("audited gone", lambda: self.c.get_job("audited") is None)


if __name__ == "__main__":
    unittest.main()
