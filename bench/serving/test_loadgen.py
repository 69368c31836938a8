"""Unit tests of the load generator: the trace reader and its errors, the schedules, the
percentile maths, and one run against a small in-process fake of a streaming endpoint.

Run: /usr/bin/python3 -m unittest discover -s bench/serving -p 'test_loadgen.py' -v
"""

import http.server
import json
import os
import tempfile
import threading
import unittest

import loadgen

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


class TraceReaderTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, text):
        path = os.path.join(self._tmp.name, "t.csv")
        with open(path, "w") as f:
            f.write(text)
        return path

    def error_of(self, text):
        with self.assertRaises(loadgen.TraceError) as cm:
            loadgen.read_trace(self.write(text))
        return str(cm.exception)

    def test_reads_rows_with_line_numbers_and_sub_second_arrivals(self):
        rows = loadgen.read_trace(self.write(
            HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 18:15:50.9951690,396,109\n\n"
            "2023-11-16 18:16:00,5,0\n"))
        self.assertEqual([(r.line, r.context_tokens, r.generated_tokens) for r in rows],
                         [(2, 374, 44), (3, 396, 109), (5, 5, 0)])
        self.assertAlmostEqual(rows[1].arrival_s - rows[0].arrival_s, 4.314579, places=6)
        self.assertAlmostEqual(rows[2].arrival_s - rows[0].arrival_s, 13.31941, places=6)
        self.assertEqual(loadgen.parse_timestamp("1970-01-01 00:00:01.5"), 1.5)

    def test_each_malformed_row_names_the_line_and_column(self):
        good = "2023-11-16 18:15:46.6805900,374,44\n"
        cases = [
            ("TIMESTAMP,Context,Generated\n" + good, "t.csv:1: the header must be"),
            (HEADER + good + "2023-11-16 18:15:47,374\n", "t.csv:3: expected 3 columns"),
            (HEADER + good + "yesterday,1,1\n", "t.csv:3: column TIMESTAMP: 'yesterday'"),
            (HEADER + good + "2023-11-16 25:00:00.1,1,1\n", "t.csv:3: column TIMESTAMP"),
            (HEADER + good + "2023-11-16 18:15:47.12x,1,1\n", "t.csv:3: column TIMESTAMP"),
            (HEADER + good + "2023-11-16 18:15:45.0,1,1\n",
             "t.csv:3: column TIMESTAMP: 2023-11-16 18:15:45.0 is earlier"),
            (HEADER + good + "2023-11-16 18:15:47,abc,1\n",
             "t.csv:3: column ContextTokens: 'abc' is not a whole number"),
            (HEADER + good + "2023-11-16 18:15:47,-4,1\n",
             "t.csv:3: column ContextTokens: '-4' is not a whole number"),
            (HEADER + good + "2023-11-16 18:15:47,0,1\n",
             "t.csv:3: column ContextTokens: must be at least 1"),
            (HEADER + good + "2023-11-16 18:15:47,3,1.5\n",
             "t.csv:3: column GeneratedTokens: '1.5' is not a whole number"),
            (HEADER, "t.csv: no requests"),
        ]
        for text, expected in cases:
            self.assertIn(expected, self.error_of(text), text)

    def test_the_shared_azure_trace_reads_cleanly(self):
        if not os.path.exists(loadgen.DEFAULT_TRACE):
            self.skipTest("../shared/traces/azure-llm-inference-2023/conv.csv is not here")
        rows = loadgen.read_trace(loadgen.DEFAULT_TRACE)
        self.assertGreater(len(rows), 19000)
        span = rows[-1].arrival_s - rows[0].arrival_s
        self.assertTrue(3000 < span < 3700, span)  # one hour of arrivals


class ScheduleTest(unittest.TestCase):
    def rows(self):
        base = 1_700_000_000.0
        return [loadgen.TraceRow(2, base, 1000, 300), loadgen.TraceRow(3, base + 2.0, 40, 0),
                loadgen.TraceRow(4, base + 10.0, 600, 20)]

    def test_trace_time_is_divided_by_the_scale_and_lengths_are_capped(self):
        arrivals = loadgen.trace_schedule(self.rows(), 4.0, 512, 128, name="c.csv")
        self.assertEqual([(a.offset_s, a.prompt_tokens, a.max_tokens, a.source)
                          for a in arrivals],
                         [(0.0, 512, 128, "c.csv:2"), (0.5, 40, 1, "c.csv:3"),
                          (2.5, 512, 20, "c.csv:4")])

    def test_skip_starts_later_in_the_trace(self):
        arrivals = loadgen.trace_schedule(self.rows(), 1.0, 512, 128, skip_s=1.0)
        self.assertEqual([a.offset_s for a in arrivals], [1.0, 9.0])
        with self.assertRaises(ValueError):
            loadgen.trace_schedule(self.rows(), 0, 512, 128)

    def test_fixed_rate_even_and_poisson(self):
        even = loadgen.fixed_schedule(4.0, 100, 10, 5)
        self.assertEqual([a.offset_s for a in even], [0.0, 0.25, 0.5, 0.75, 1.0])
        poisson = loadgen.fixed_schedule(10.0, 100, 10, 4001, poisson=True, seed=3)
        self.assertEqual(poisson, loadgen.fixed_schedule(10.0, 100, 10, 4001, True, 3))
        rate = 4000 / poisson[-1].offset_s
        self.assertTrue(9.5 < rate < 10.5, rate)
        gaps = [b.offset_s - a.offset_s for a, b in zip(poisson, poisson[1:])]
        self.assertGreater(len(set(gaps)), 3900)


class PromptTest(unittest.TestCase):
    def test_prompts_have_the_asked_length_in_ascii_and_differ(self):
        for length in range(1, 300):
            text = loadgen.prompt_text(length, length)
            self.assertEqual(len(text.encode()), length)
        self.assertNotEqual(loadgen.prompt_text(50, 1), loadgen.prompt_text(50, 2))
        self.assertEqual(loadgen.prompt_text(50, 1), loadgen.prompt_text(50, 1))


class PercentileTest(unittest.TestCase):
    def test_known_values(self):
        p = loadgen.percentile
        self.assertIsNone(p([], 50))
        self.assertEqual(p([7], 99), 7)
        self.assertEqual(p([5, 1, 4, 2, 3], 50), 3)
        self.assertEqual(p([5, 1, 4, 2, 3], 0), 1)
        self.assertEqual(p([5, 1, 4, 2, 3], 100), 5)
        self.assertEqual(p([5, 1, 4, 2, 3], 25), 2)
        self.assertEqual(p([10, 20], 50), 15)
        self.assertAlmostEqual(p(list(range(1, 101)), 99), 99.01)
        self.assertAlmostEqual(p(list(range(1, 101)), 50), 50.5)
        with self.assertRaises(ValueError):
            p([1], 101)

    def test_properties_over_random_samples(self):
        import random
        rng = random.Random(5)
        for _ in range(200):
            values = [rng.uniform(0, 100) for _ in range(rng.randint(1, 50))]
            s = sorted(values)
            qs = sorted(rng.uniform(0, 100) for _ in range(10))
            got = [loadgen.percentile(values, q) for q in qs]
            self.assertEqual(got, sorted(got))  # monotone in q
            self.assertTrue(s[0] <= got[0] and got[-1] <= s[-1])
            # At q = 100 k / (n - 1) it is exactly the k-th smallest value.
            for k in range(len(s)):
                q = 100.0 * k / (len(s) - 1) if len(s) > 1 else 50.0
                self.assertAlmostEqual(loadgen.percentile(values, q), s[k], places=9)

    def test_summary_of_results(self):
        a = loadgen.Arrival(0, 10, 5, "x:2")
        ok = loadgen.Result(a, 0.0, start_s=1.0, first_token_s=1.1, last_token_s=1.5,
                            end_s=1.6, tokens=5)
        one_token = loadgen.Result(a, 0.0, start_s=2.0, first_token_s=2.3, last_token_s=2.3,
                                   end_s=2.4, tokens=1)
        bad = loadgen.Result(a, 0.0, start_s=3.0, error="http_503", detail="full")
        report = loadgen.summarize([ok, one_token, bad], 2.0)
        self.assertEqual(report["requests"]["errors"], {"http_503": 1})
        self.assertEqual(report["requests"]["error_examples"], {"http_503": "x:2: full"})
        self.assertEqual(report["tpot_ms"]["count"], 1)  # one token has no per-token time
        self.assertAlmostEqual(report["tpot_ms"]["p50"], 100.0)
        self.assertAlmostEqual(report["ttft_ms"]["p50"], 200.0)
        self.assertAlmostEqual(report["e2e_ms"]["p99"], 598.0)  # 400 + 0.99 * (600 - 400)
        self.assertEqual(report["throughput"]["req_per_s"], 1.0)
        self.assertEqual(report["throughput"]["output_tokens_per_s"], 3.0)


class FakeCompletions(http.server.BaseHTTPRequestHandler):
    """A fake streaming endpoint (unit tests only): max_tokens 7 gets a 503, 9 is cut off after
    four tokens, anything else streams max_tokens one-character chunks, usage and [DONE]."""
    protocol_version = "HTTP/1.1"
    bodies = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeCompletions.bodies.append(body)
        if body["max_tokens"] == 7:
            data = b'{"error": {"message": "full"}}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(payload):
            data = b"data: " + payload.encode() + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(body["max_tokens"]):
            event(json.dumps({"choices": [{"text": "a", "index": 0}]}))
            if body["max_tokens"] == 9 and i == 3:
                self.close_connection = True
                return
        event(json.dumps({"choices": [], "usage": {"completion_tokens": body["max_tokens"]}}))
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class RunTest(unittest.TestCase):
    def test_streams_are_timed_and_errors_counted_by_kind(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeCompletions)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            arrivals = [loadgen.Arrival(0.0, 20, 4, "f:1"), loadgen.Arrival(0.01, 30, 7, "f:2"),
                        loadgen.Arrival(0.02, 40, 9, "f:3"), loadgen.Arrival(5.0, 5, 5, "f:4")]
            results, wall = loadgen.run(arrivals, url, duration_s=1.0, timeout_s=30)
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(len(results), 3)  # the one due at 5 s is past the duration
        by_source = {r.arrival.source: r for r in results}
        self.assertEqual((by_source["f:1"].error, by_source["f:1"].tokens), (None, 4))
        self.assertEqual(by_source["f:2"].error, "http_503")
        self.assertEqual(by_source["f:3"].error, "incomplete_stream")
        report = loadgen.summarize(results, wall)
        self.assertEqual(report["requests"]["ok"], 1)
        self.assertEqual(report["requests"]["errors"], {"http_503": 1, "incomplete_stream": 1})
        sent = sorted(FakeCompletions.bodies, key=lambda b: b["max_tokens"])
        self.assertEqual([len(b["prompt"]) for b in sent], [20, 30, 40])
        self.assertTrue(all(b["stream"] is True for b in sent))
        r = by_source["f:1"]
        self.assertTrue(r.start_s <= r.first_token_s <= r.last_token_s <= r.end_s)
        text = loadgen.render_text({"load": "test"}, report)
        self.assertIn("http_503 1", text)


if __name__ == "__main__":
    unittest.main()
