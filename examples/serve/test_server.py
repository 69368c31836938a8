"""Runs examples/serve/server.py for real: a group of one and a tensor-parallel group of two
(torch.distributed gloo on loopback), talking HTTP to the leader.

Run: /usr/bin/python3 -m unittest discover -s examples/serve -v
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "server.py")
DEADLINE_S = 120  # generous: the machine is shared; every wait polls a condition


def python_with_torch():
    """This interpreter if it has torch, else Debian's (which has python3-torch)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if candidate and os.path.exists(candidate):
            if subprocess.run([candidate, "-c", probe]).returncode == 0:
                return candidate
    return None


PYTHON = python_with_torch()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")


class Group:
    """One replica: `size` server processes on loopback; HTTP port 0, found via --port-file."""

    def __init__(self, size, tmp, extra_args=()):
        self.size = size
        self.port_file = os.path.join(tmp, f"port-{size}-{time.monotonic_ns()}")
        master_port = str(free_port())
        self.procs = []
        for worker in range(size):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("TESSERA_", "MASTER_", "PORT"))}
            env.update(TESSERA_GROUP_SIZE=str(size), TESSERA_WORKER_INDEX=str(worker),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=master_port, PORT="0")
            args = [PYTHON, SERVER, "--host", "127.0.0.1", "--context", "1024",
                    "--collective-timeout-s", "30", *extra_args]
            if worker == 0:
                args += ["--port-file", self.port_file]
            self.procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, text=True))
        self.port = None

    def wait_ready(self):
        def ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"a server process exited with {p.returncode}: "
                                         f"{p.stderr.read()}")
            if self.port is None and os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    self.port = int(f.read())
            return self.port is not None and get(self.port, "/healthz")[0] == 200
        wait_for(ready, f"a group of {self.size} to answer /healthz with 200")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stderr.close()


def request(port, method, path, body=None, raw=None, timeout=DEADLINE_S):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.headers
    finally:
        conn.close()


def get(port, path):
    try:
        status, data, _ = request(port, "GET", path, timeout=5)
    except OSError:
        return None, None
    return status, json.loads(data)


def complete(port, **body):
    status, data, _ = request(port, "POST", "/v1/completions", body)
    assert status == 200, (status, data)
    return json.loads(data)["choices"][0]["text"]


def stream_events(port, body):
    """Reads a streamed completion at the HTTP-chunk level: a list of chunk payloads (bytes),
    so the test sees how the server framed and flushed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        data = json.dumps(body).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        f = s.makefile("rb")
        status = f.readline()
        assert b" 200 " in status, status
        headers = {}
        while True:
            line = f.readline().strip()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        assert headers["content-type"] == "text/event-stream", headers
        assert headers["transfer-encoding"] == "chunked", headers
        chunks = []
        while True:
            size = int(f.readline().strip(), 16)
            payload = f.read(size)
            assert f.read(2) == b"\r\n"
            if size == 0:
                return chunks
            chunks.append(payload)


def event_of(chunk):
    assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n"), chunk
    text = chunk[len(b"data: "):-2].decode()
    return text if text == "[DONE]" else json.loads(text)


PROMPTS = ["Hello", "tessera serves models on slices of accelerators.", "", "ünïcödé ✓"]


@unittest.skipIf(PYTHON is None, "no Python interpreter with torch (Debian's python3-torch)")
class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.one = Group(1, cls._tmp.name)
        cls.two = Group(2, cls._tmp.name)
        try:
            cls.one.wait_ready()
            cls.two.wait_ready()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.one.stop()
        cls.two.stop()
        cls._tmp.cleanup()

    def test_two_processes_give_the_same_greedy_tokens_as_one(self):
        for prompt in PROMPTS:
            body = {"prompt": prompt, "max_tokens": 40, "temperature": 0}
            one = complete(self.one.port, **body)
            two = complete(self.two.port, **body)
            self.assertEqual(len(one), 40)
            self.assertEqual(one, two, f"prompt {prompt!r}")
        # Not a constant function of the prompt.
        self.assertNotEqual(complete(self.one.port, prompt="a", max_tokens=8, temperature=0),
                            complete(self.one.port, prompt="b", max_tokens=8, temperature=0))

    def test_seeded_sampling_repeats_and_matches_across_group_sizes(self):
        body = {"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0.9, "seed": 7}
        first = complete(self.one.port, **body)
        self.assertEqual(first, complete(self.one.port, **body))
        self.assertEqual(first, complete(self.two.port, **body))
        self.assertNotEqual(first, complete(self.one.port, **{**body, "seed": 8}))
        greedy = complete(self.one.port, **{**body, "temperature": 0})
        self.assertNotEqual(first, greedy)

    def test_stream_sends_one_http_chunk_per_token_then_done(self):
        body = {"prompt": "Hello", "max_tokens": 12, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        for group in (self.one, self.two):
            chunks = stream_events(group.port, body)
            events = [event_of(c) for c in chunks]
            self.assertEqual(events[-1], "[DONE]")
            tokens, usage = events[:12], events[12]
            self.assertEqual(len(events), 14)
            for i, e in enumerate(tokens):
                self.assertEqual(e["object"], "text_completion")
                self.assertEqual(len(e["choices"][0]["text"]), 1)
                self.assertEqual(e["choices"][0]["finish_reason"], "length" if i == 11 else None)
            self.assertEqual(usage["usage"], {"prompt_tokens": 5, "completion_tokens": 12,
                                              "total_tokens": 17})
            text = "".join(e["choices"][0]["text"] for e in tokens)
            self.assertEqual(text, complete(group.port, prompt="Hello", max_tokens=12,
                                            temperature=0))

    def test_stream_arrives_while_generating_and_a_client_that_leaves_frees_its_slot(self):
        # 900 tokens take seconds; the first must arrive while the rest are still being made.
        body = json.dumps({"prompt": "Hi", "max_tokens": 900, "temperature": 0,
                           "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", self.two.port), timeout=DEADLINE_S) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
            f = s.makefile("rb")
            while b"data: " not in f.readline():
                pass
            status, health = get(self.two.port, "/healthz")
            self.assertEqual((status, health["running"]), (200, 1))
            f.close()
        wait_for(lambda: get(self.two.port, "/healthz")[1]["running"] == 0,
                 "the abandoned stream's slot to be freed")

    def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(self):
        alone = {p: complete(self.one.port, prompt=p, max_tokens=25, temperature=0)
                 for p in PROMPTS}
        together = {}

        def run(prompt):
            together[prompt] = complete(self.two.port, prompt=prompt, max_tokens=25,
                                        temperature=0)

        threads = [threading.Thread(target=run, args=(p,)) for p in PROMPTS * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(together, alone)

    def test_bad_requests_get_400_naming_the_field(self):
        cases = [
            ({"max_tokens": 5}, 400, "prompt"),
            ({"prompt": 5}, 400, "prompt"),
            ({"prompt": ["a", "b"]}, 400, "prompt"),
            ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
            ({"prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
            ({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
            ({"prompt": "x", "max_tokens": 2.5}, 400, "max_tokens"),
            ({"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
            ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
            ({"prompt": "x", "temperature": 3}, 400, "temperature"),
            ({"prompt": "x", "stream": "yes"}, 400, "stream"),
            ({"prompt": "x", "seed": -1}, 400, "seed"),
            ({"prompt": "x", "n": 2}, 400, "n"),
            ({"prompt": "x" * 1100}, 400, "prompt"),
            ({"prompt": "x" * 1000, "max_tokens": 100}, 400, "max_tokens"),
            ({"prompt": "x", "model": "gpt-9"}, 404, "model"),
        ]
        for body, status, param in cases:
            got, data, _ = request(self.one.port, "POST", "/v1/completions", body)
            err = json.loads(data)["error"]
            self.assertEqual((got, err["param"]), (status, param), body)
            self.assertTrue(err["message"].startswith(param + ":"), err["message"])
            self.assertEqual(err["type"], "invalid_request_error")
        for raw in (b"{not json", b"[1, 2]", b""):
            got, data, _ = request(self.one.port, "POST", "/v1/completions", raw=raw)
            self.assertEqual(got, 400, raw)
            self.assertIn("JSON", json.loads(data)["error"]["message"])
        # The connection survives a refused request (keep-alive) and the server still serves.
        self.assertEqual(len(complete(self.one.port, prompt="ok", max_tokens=3)), 3)

    def test_models_and_unknown_routes(self):
        status, body = get(self.two.port, "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual([m["id"] for m in body["data"]], ["tessera-tiny"])
        status, body = get(self.two.port, "/healthz")
        self.assertEqual((status, body["status"], body["groupSize"]), (200, "ok", 2))
        status, data, _ = request(self.one.port, "GET", "/v2/nothing")
        self.assertEqual(status, 404)
        self.assertIn("/v1/completions", json.loads(data)["error"]["message"])


@unittest.skipIf(PYTHON is None, "no Python interpreter with torch (Debian's python3-torch)")
class GroupFailureTest(unittest.TestCase):
    def test_a_dead_follower_fails_the_leader_so_the_group_is_recreated(self):
        with tempfile.TemporaryDirectory() as tmp:
            group = Group(2, tmp)
            try:
                group.wait_ready()
                self.assertEqual(len(complete(group.port, prompt="x", max_tokens=4)), 4)
                group.procs[1].send_signal(signal.SIGKILL)
                # Idle, the leader notices at its next keep-alive broadcast; a request notices
                # at once. Either way it must exit 1 and fail the request with an error.
                try:
                    status, data, _ = request(group.port, "POST", "/v1/completions",
                                              {"prompt": "x", "max_tokens": 50})
                    self.assertIn(status, (500, 503), data)
                except (ConnectionError, http.client.HTTPException):
                    pass  # the leader exited while answering
                self.assertEqual(group.procs[0].wait(timeout=DEADLINE_S), 1)
            finally:
                group.stop()

    def test_sigterm_stops_the_leader_and_its_followers_cleanly(self):
        with tempfile.TemporaryDirectory() as tmp:
            group = Group(2, tmp)
            try:
                group.wait_ready()
                group.procs[0].send_signal(signal.SIGTERM)
                codes = [p.wait(timeout=DEADLINE_S) for p in group.procs]
                self.assertEqual(codes, [0, 0], [p.stderr.read()[-2000:] for p in group.procs])
            finally:
                group.stop()

    def test_sigterm_to_every_process_drains_the_requests_in_flight(self):
        # What an agent does to a group scaled down or replaced: SIGTERM to each process. The
        # request in flight finishes; new connections are refused (a router retries those).
        with tempfile.TemporaryDirectory() as tmp:
            group = Group(2, tmp)
            try:
                group.wait_ready()
                got = []
                t = threading.Thread(target=lambda: got.append(stream_events(
                    group.port, {"prompt": "x", "max_tokens": 300, "stream": True})))
                t.start()
                wait_for(lambda: get(group.port, "/healthz")[1]["running"] == 1,
                         "the request running")
                for p in group.procs:
                    p.send_signal(signal.SIGTERM)
                t.join(timeout=DEADLINE_S)
                events = [event_of(c) for c in got[0]]
                self.assertEqual(events[-1], "[DONE]")
                self.assertEqual(len([e for e in events[:-1] if e.get("choices")]), 300)
                self.assertEqual([p.wait(timeout=DEADLINE_S) for p in group.procs], [0, 0])
                with self.assertRaises(ConnectionError):
                    socket.create_connection(("127.0.0.1", group.port), timeout=5).close()
            finally:
                group.stop()


if __name__ == "__main__":
    unittest.main()
