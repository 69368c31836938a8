"""tessera.client against a small fake head in this process: reserve_slices and the
SliceReservation handle (ready blocks like Ray's placement group, the Pending reason in its
TimeoutError, Expired, delete refused while in use unless force), and watch's resume at the
protocol level (a line cut off by a drop, a 410 mid-watch).

A fake head, not the real one, so that these run without the binary and can cut a stream at
an exact byte; the real head's contract is covered by test_client.py.
"""
import json
import threading
import time
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tessera import client as tc

PENDING_REASON = "waiting for 2 free v6e 4x4 slices, 1 is free; would fit after job big ends"


class FakeHead:
    """Reservations kept in memory with Kubernetes-style resource versions and a history."""

    def __init__(self):
        self.lock = threading.Condition()
        self.objects = {}  # name -> object
        self.version = 1000
        self.history = []  # (version, line)
        self.oldest = 1000  # versions before this answer 410
        self.applied = []  # the documents POSTed, as sent
        self.in_use = {}  # name -> ["job/a", ...]
        self.cut_next_watch = None  # (whole lines, then this many bytes of the next line)
        self.watch_paths = []
        self.list_paths = []
        self.refuse_next_watch_410 = False
        self.streams_epoch = 0  # bumped to end every open watch stream
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.stopping = False

    def stop(self):
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def publish(self, type_, obj):
        """Records a change under the lock's owner (callers hold self.lock)."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        line = json.dumps({"type": type_, "object": obj, "resourceVersion": str(self.version)})
        self.history.append((self.version, line + "\n"))
        self.lock.notify_all()

    def set_status(self, name, **status):
        with self.lock:
            obj = json.loads(json.dumps(self.objects[name]))
            obj["status"] = status
            self.objects[name] = obj
            self.publish("MODIFIED", obj)

    def add(self, name):
        with self.lock:
            obj = {"kind": "SliceReservation", "metadata": {"name": name}, "spec": {},
                   "status": {"phase": "Pending"}}
            self.objects[name] = obj
            self.publish("ADDED", obj)

    def _handler(head):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def refuse(self, code, message, field):
                self.reply(code, {"error": message, "field": field})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/api/v1/apply":
                    return self.refuse(404, "no route " + self.path, None)
                ttl = body.get("spec", {}).get("ttl")
                if ttl is not None and not ttl[:-1].isdigit():
                    return self.refuse(422, "spec.ttl: '%s' is not a duration (e.g. 30m, 2h)"
                                       % ttl, "spec.ttl")
                with head.lock:
                    head.applied.append(json.loads(json.dumps(body)))
                    name = body["metadata"]["name"]
                    obj = dict(body, status={"phase": "Pending", "reason": PENDING_REASON})
                    head.objects[name] = obj
                    head.publish("ADDED", obj)
                self.reply(201, {"kind": body["kind"], "name": name, "created": True})

            def do_DELETE(self):
                url = urllib.parse.urlsplit(self.path)
                name = url.path.rsplit("/", 1)[1]
                force = urllib.parse.parse_qs(url.query).get("force") == ["true"]
                with head.lock:
                    if name not in head.objects:
                        return self.refuse(404, "reservation %s not found" % name, "metadata.name")
                    users = head.in_use.get(name)
                    if users and not force:
                        return self.refuse(409, "reservation %s is in use by %s; delete them "
                                           "first or delete with force" % (name, ", ".join(users)),
                                           "metadata.name")
                    obj = head.objects.pop(name)
                    head.publish("DELETED", obj)
                self.reply(200, {"deleted": name})

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                parts = url.path.split("/")  # "", api, v1, slicereservations[, name]
                if parts[3] != "slicereservations":
                    return self.refuse(404, "no route " + url.path, None)
                if len(parts) == 5:
                    with head.lock:
                        obj = head.objects.get(parts[4])
                    if obj is None:
                        return self.refuse(404, "reservation %s not found" % parts[4],
                                           "metadata.name")
                    return self.reply(200, obj)
                if query.get("watch") != ["true"]:
                    with head.lock:
                        head.list_paths.append(self.path)
                        if "limit" not in query:
                            return self.reply(200, {"items": list(head.objects.values()),
                                                    "metadata": {"resourceVersion":
                                                                 str(head.version)}})
                        # Pages as the head cuts them: by name, after the token's position,
                        # every page at the first page's version.
                        after, version = "", str(head.version)
                        if "continue" in query:
                            version, after = query["continue"][0].split(":", 1)
                        names = sorted(n for n in head.objects if n > after)
                        limit = int(query["limit"][0])
                        meta = {"resourceVersion": version}
                        if len(names) > limit:
                            meta["continue"] = "%s:%s" % (version, names[limit - 1])
                            meta["remainingItemCount"] = len(names) - limit
                        return self.reply(200, {"items": [head.objects[n] for n in names[:limit]],
                                                "metadata": meta})
                try:
                    self.watch(int(query["resourceVersion"][0]))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away

            def watch(self, after):
                with head.lock:
                    head.watch_paths.append(self.path)
                    gone = after < head.oldest or head.refuse_next_watch_410
                    head.refuse_next_watch_410 = False
                    cut, head.cut_next_watch = head.cut_next_watch, None
                    epoch = head.streams_epoch
                if gone:
                    return self.refuse(410, "resourceVersion: %d is too old" % after,
                                       "resourceVersion")
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                written = 0
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    with head.lock:
                        lines = [l for v, l in head.history if v > after]
                        if head.streams_epoch != epoch:
                            return
                        if not lines:
                            if head.stopping:
                                return
                            head.lock.wait(0.1)
                            continue
                    for line in lines:
                        if cut is not None and written == cut[0]:
                            self.wfile.write(line.encode()[:cut[1]])
                            self.wfile.flush()
                            return  # the dropped connection
                        self.wfile.write(line.encode())
                        self.wfile.flush()
                        written += 1
                        after = json.loads(line)["resourceVersion"]
                        after = int(after)

        return Handler


class ReserveSlicesTest(unittest.TestCase):
    def setUp(self):
        self.head = FakeHead()
        self.c = tc.Client(self.head.url, "token", timeout=5)

    def tearDown(self):
        self.head.stop()

    def test_reserve_sends_the_spec_and_ready_blocks_until_ready(self):
        r = self.c.reserve_slices("v6e", "4x4", 2, name="pg", queue="team-a", ttl="2h",
                                  priority="high")
        self.assertEqual(self.head.applied[0], {
            "apiVersion": "tessera/v1", "kind": "SliceReservation",
            "metadata": {"name": "pg", "queue": "team-a"},
            "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 2,
                     "priority": "high", "ttl": "2h"}})
        slices = [{"name": "slice-0", "hosts": ["h0", "h1"]},
                  {"name": "slice-1", "hosts": ["h2", "h3"]}]
        timer = threading.Timer(0.3, lambda: self.head.set_status(
            "pg", phase="Ready", slices=slices, hosts=["h0", "h1", "h2", "h3"]))
        timer.start()
        started = time.monotonic()
        self.assertIs(r.ready(timeout=20), r)
        timer.join()
        self.assertGreaterEqual(time.monotonic() - started, 0.25)  # it did block
        self.assertEqual(r.phase, "Ready")
        self.assertEqual(r.slices, slices)
        self.assertEqual(r.hosts, ["h0", "h1", "h2", "h3"])
        self.assertEqual(r.users, [])
        self.head.set_status("pg", phase="Ready", slices=slices, users=["trainjob/a"])
        r.refresh()
        self.assertEqual(r.users, ["trainjob/a"])
        self.assertIs(r.ready(timeout=0), r)  # already Ready: returns at once

    def test_hosts_come_from_the_slices_when_status_has_no_list(self):
        r = self.c.reserve_slices("v6e", "2x2", 1, name="one")
        self.head.set_status("one", phase="Ready", slices=[{"name": "s0", "hosts": ["a"]}])
        self.assertEqual(r.ready(timeout=10).hosts, ["a"])

    def test_timeout_names_the_pending_reason(self):
        r = self.c.reserve_slices("v6e", "4x4", 2, name="stuck")
        started = time.monotonic()
        with self.assertRaises(TimeoutError) as e:
            r.ready(timeout=0.3)
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("stuck", str(e.exception))
        self.assertIn("Pending", str(e.exception))
        self.assertIn(PENDING_REASON, str(e.exception))
        self.head.set_status("stuck", phase="Pending", reason="Pending", message="no room",
                             pendingReason="needs 32 v6e chips, 16 free",
                             wouldHelp=[{"name": "big", "clusterQueue": "research", "chips": 16}])
        with self.assertRaises(TimeoutError) as e:
            r.ready(timeout=0.2)
        self.assertIn("Pending: no room: needs 32 v6e chips, 16 free; would fit after: big "
                      "(research, 16 chips)", str(e.exception))
        with self.assertRaises(TimeoutError):  # reserve_slices(timeout=) waits the same way
            self.c.reserve_slices("v6e", "4x4", 2, name="stuck-too", timeout=0.2)

    def test_expired_or_deleted_is_never_ready(self):
        r = self.c.reserve_slices("v6e", "4x4", 1, name="short", ttl="1m")
        threading.Timer(0.1, lambda: self.head.set_status(
            "short", phase="Expired", reason="ttl 1m passed")).start()
        with self.assertRaises(RuntimeError) as e:
            r.ready(timeout=20)
        self.assertIn("Expired", str(e.exception))
        self.assertIn("ttl 1m passed", str(e.exception))
        gone = self.c.reserve_slices("v6e", "4x4", 1, name="gone")
        threading.Timer(0.1, lambda: self.c.delete("reservation", "gone")).start()
        with self.assertRaises(RuntimeError) as e:
            gone.ready(timeout=20)
        self.assertIn("deleted", str(e.exception))

    def test_delete_in_use_is_refused_unless_forced(self):
        r = self.c.reserve_slices("v6e", "4x4", 1, name="busy")
        self.head.in_use["busy"] = ["job/train", "service/chat"]
        with self.assertRaises(tc.ApiError) as e:
            r.delete()
        self.assertEqual((e.exception.status, e.exception.field), (409, "metadata.name"))
        self.assertIn("job/train, service/chat", e.exception.message)
        self.assertIn("job/train", str(e.exception))
        r.delete(force=True)
        with self.assertRaises(tc.ApiError) as e:
            self.c.reservation("busy")
        self.assertEqual(e.exception.status, 404)

    def test_context_manager_deletes_and_refusals_carry_the_field(self):
        with self.c.reserve_slices("v6e", "4x4", 1, name="scoped") as r:
            self.assertEqual(self.c.reservation("scoped").name, r.name)
        self.assertNotIn("scoped", self.head.objects)
        with self.assertRaises(tc.ApiError) as e:
            self.c.reserve_slices("v6e", "4x4", 1, name="bad-ttl", ttl="soon")
        self.assertEqual((e.exception.status, e.exception.field), (422, "spec.ttl"))
        self.assertIn("not a duration", e.exception.message)
        for bad in (0, -1, 1.5, True, "2"):
            with self.assertRaises(ValueError):
                self.c.reserve_slices("v6e", "4x4", bad)


class CallTest(unittest.TestCase):
    def setUp(self):
        self.head = FakeHead()

    def tearDown(self):
        self.head.stop()

    def test_call_returns_the_status_and_sends_no_token_when_none(self):
        c = tc.Client(self.head.url, "token", timeout=5)
        doc = {"kind": "SliceReservation", "metadata": {"name": "x"}, "spec": {}}
        self.assertEqual(c.call("POST", "/api/v1/apply", doc),
                         (201, {"kind": "SliceReservation", "name": "x", "created": True}))
        status, body = c.call("GET", "/api/v1/slicereservations/none")
        self.assertEqual((status, body["field"]), (404, "metadata.name"))
        self.assertEqual(c.call("POST", "/api/v1/nowhere", b"{}")[0], 404)
        seen = []
        real = self.head.server.RequestHandlerClass.do_GET

        def spy(handler):
            seen.append(handler.headers.get("Authorization"))
            return real(handler)
        self.head.server.RequestHandlerClass.do_GET = spy
        tc.Client(self.head.url, None).call("GET", "/api/v1/slicereservations")
        c.call("GET", "/api/v1/slicereservations")
        self.assertEqual(seen, [None, "Bearer token"])


class ListPagesTest(unittest.TestCase):
    def setUp(self):
        self.head = FakeHead()
        self.c = tc.Client(self.head.url, "token", timeout=5)

    def tearDown(self):
        self.head.stop()

    def test_list_follows_continue_until_the_last_page(self):
        for name in ["e", "a", "d", "c", "b"]:
            self.head.add(name)
        items = self.c.list("reservations", chunk_size=2)
        self.assertEqual([i["metadata"]["name"] for i in items], ["a", "b", "c", "d", "e"])
        self.assertEqual(len(self.head.list_paths), 3)
        self.assertTrue(all("limit=2" in p for p in self.head.list_paths))
        self.assertNotIn("continue=", self.head.list_paths[0])
        version = str(self.head.version)
        self.assertIn("continue=" + urllib.parse.quote("%s:b" % version), self.head.list_paths[1])
        self.assertIn("continue=" + urllib.parse.quote("%s:d" % version), self.head.list_paths[2])

    def test_chunk_size_zero_asks_once_for_the_whole_list(self):
        for name in ["a", "b", "c"]:
            self.head.add(name)
        self.assertEqual(len(self.c.list("reservations", chunk_size=0)), 3)
        self.assertEqual(len(self.head.list_paths), 1)
        self.assertNotIn("limit=", self.head.list_paths[0])


class WatchProtocolTest(unittest.TestCase):
    def setUp(self):
        self.head = FakeHead()
        self.c = tc.Client(self.head.url, "token", timeout=5)

    def tearDown(self):
        self.head.stop()

    def collect(self, watch, count):
        out = []
        for change in watch:
            out.append((change.type, change.name, change.revision))
            if len(out) == count:
                break
        return out

    def test_a_line_cut_by_a_drop_comes_again_once(self):
        for i in range(3):
            self.head.add("r%d" % i)
        # The first stream gives one whole line and half of the next, then drops.
        self.head.cut_next_watch = (1, 25)
        start = str(self.head.oldest)
        seen = self.collect(self.c.watch("reservations", resource_version=start, timeout=20,
                                         reconnect_delay=0.01), 3)
        self.assertEqual([(t, n) for t, n, _ in seen], [("ADDED", "r0"), ("ADDED", "r1"),
                                                        ("ADDED", "r2")])
        self.assertEqual(len(set(v for _, _, v in seen)), 3)
        self.assertEqual(len(self.head.watch_paths), 2)
        self.assertIn("resourceVersion=%s" % seen[0][2], self.head.watch_paths[1])

    def test_without_a_version_it_lists_then_watches_from_the_list(self):
        self.head.add("before")
        watch = self.c.watch("reservations", timeout=20, reconnect_delay=0.01)
        first = next(watch)
        self.assertEqual((first.type, first.name), ("ADDED", "before"))
        self.head.add("after")
        second = next(watch)
        self.assertEqual((second.type, second.name), ("ADDED", "after"))
        self.assertEqual(len(self.head.watch_paths), 1)
        self.assertIn("resourceVersion=%s" % first.revision, self.head.watch_paths[0])

    def test_a_410_lists_again_and_yields_only_the_differences(self):
        self.head.add("kept")
        self.head.add("changed")
        self.head.add("removed")
        watch = self.c.watch("reservations", timeout=20, reconnect_delay=0.01)
        self.assertEqual(sorted(next(watch).name for _ in range(3)),
                         ["changed", "kept", "removed"])
        # While the client is away, the head forgets history past what it had yielded.
        with self.head.lock:
            self.head.refuse_next_watch_410 = True
            self.head.objects["changed"]["status"] = {"phase": "Ready"}
            del self.head.objects["removed"]
            self.head.objects["new"] = {"metadata": {"name": "new"}, "status": {}}
            self.head.version += 5
            self.head.streams_epoch += 1  # the open stream ends, as when the head restarts
            self.head.lock.notify_all()
        seen = []
        for change in watch:
            seen.append((change.type, change.name))
            if ("ADDED", "new") in seen and ("DELETED", "removed") in seen:
                break
        self.assertEqual(sorted(seen), [("ADDED", "new"), ("DELETED", "removed"),
                                        ("MODIFIED", "changed")])


if __name__ == "__main__":
    unittest.main()
