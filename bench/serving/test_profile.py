"""Unit tests of profile.py's pure parts: the decode window, medians, the concurrency list, the
profile's fields, and the command line's refusals. No server is started.

Run: /usr/bin/python3 -m unittest discover -s bench/serving -p 'test_profile.py' -v
"""

import contextlib
import importlib.util
import io
import os
import unittest

# bench/serving/profile.py by its path: its name is also the standard library's profiler's.
_SPEC = importlib.util.spec_from_file_location(
    "serving_profile", os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile.py"))
bench_profile = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_profile)


class MedianTest(unittest.TestCase):
    def test_odd_even_and_empty(self):
        self.assertEqual(bench_profile.median([3, 1, 2]), 2)
        self.assertEqual(bench_profile.median([4, 1, 3, 2]), 2.5)
        self.assertIsNone(bench_profile.median([]))


class CountsTest(unittest.TestCase):
    def test_parses_an_increasing_list_from_one(self):
        self.assertEqual(bench_profile.parse_counts("1,2,4,8,16"), [1, 2, 4, 8, 16])
        self.assertEqual(bench_profile.parse_counts("1"), [1])

    def test_refuses_what_the_simulator_would(self):
        for text, message in (("2,4", "must start at 1"), ("1,4,2", "must increase (2 after 4)"),
                              ("1,1", "must increase"), ("1,x", "expected whole numbers")):
            with self.assertRaises(ValueError) as cm:
                bench_profile.parse_counts(text)
            self.assertIn(message, str(cm.exception))


class DecodeWindowTest(unittest.TestCase):
    def test_counts_tokens_while_every_stream_decodes(self):
        # Stream a: a token every 0.1 s from 0.0 to 2.0; stream b starts later (first token at
        # 0.5) and ends later (2.5). The window is (0.5, 2.0]: 15 tokens of a, and b's tokens
        # at 0.6 .. 2.0 (also 15).
        a = [round(0.1 * i, 6) for i in range(21)]
        b = [round(0.5 + 0.1 * i, 6) for i in range(21)]
        seconds, group, per_request = bench_profile.decode_window([(a, 1.0), (b, 1.0)])
        self.assertAlmostEqual(seconds, 1.5)
        self.assertAlmostEqual(group, 20.0)
        self.assertAlmostEqual(per_request, 10.0)

    def test_a_chunk_may_stand_for_several_tokens(self):
        times = [0.0, 1.0, 2.0]
        _, group, per_request = bench_profile.decode_window([(times, 4.0)])
        self.assertAlmostEqual(group, 4.0)  # 2 chunks of 4 tokens in 2 s
        self.assertAlmostEqual(per_request, 4.0)

    def test_no_common_window_is_an_error_saying_what_to_raise(self):
        with self.assertRaises(bench_profile.ProfileError) as cm:
            bench_profile.decode_window([([0.0, 1.0], 1.0), ([2.0, 3.0], 1.0)])
        self.assertIn("raise --decode-tokens", str(cm.exception))
        with self.assertRaises(bench_profile.ProfileError):
            bench_profile.decode_window([([0.0], 1.0)])


class BuildProfileTest(unittest.TestCase):
    def build(self, startup):
        return bench_profile.build_profile(
            "example-cpu", "2026-12-05 02:40 UTC, 2 cores, CPU", "bench/serving/profile.py",
            "examples/serve/server.py", 1, (1.0, 2.0, 3.0), (1.5, 2.0, 3.0),
            prefill={128: [900.0, 1000.0, 1100.0], 1000: [2000.0, 2600.0, 2500.0]},
            prefill_tokens=1000,
            decode={4: [(400.0, 100.0), (420.0, 105.0), (380.0, 95.0)],
                    1: [(190.0, 190.0), (210.0, 210.0), (200.0, 200.0)]},
            startup=startup, details={"repetitions": 3})

    def test_medians_in_the_fields_the_simulator_reads(self):
        p = self.build([4.0, 3.0, 5.0])
        self.assertEqual(p["prefillTokensPerSecond"], 2500.0)
        self.assertEqual(p["startupSeconds"], 4.0)
        self.assertEqual(p["decode"], [
            {"concurrency": 1, "perRequestTokensPerSecond": 200.0,
             "perGroupTokensPerSecond": 200.0},
            {"concurrency": 4, "perRequestTokensPerSecond": 100.0,
             "perGroupTokensPerSecond": 400.0}])
        self.assertEqual(p["loadAverage"], {"before": [1.0, 2.0, 3.0], "after": [1.5, 2.0, 3.0]})
        self.assertEqual(p["details"]["startupSeconds"], [4.0, 3.0, 5.0])
        self.assertEqual([x["promptTokens"] for x in p["details"]["prefill"]], [128, 1000])
        self.assertEqual(set(p), {"name", "measuredOn", "command", "server", "groupSize",
                                  "loadAverage", "prefillTokensPerSecond", "decode",
                                  "startupSeconds", "details"})

    def test_a_stated_start_up_is_said_to_be_stated(self):
        p = self.build(30.0)
        self.assertEqual(p["startupSeconds"], 30.0)
        self.assertIn("stated", p["details"]["startupSeconds"])

    def test_the_prefill_length_must_have_been_measured(self):
        with self.assertRaises(bench_profile.ProfileError):
            bench_profile.build_profile("n", "m", "c", "s", 1, (0, 0, 0), (0, 0, 0),
                                        {128: [1.0]}, 1000, {1: [(1.0, 1.0)]}, [1.0], {})


class MachineTest(unittest.TestCase):
    def test_names_the_cpu_model(self):
        text = "processor\t: 0\nmodel name\t: Test CPU @ 2.0GHz\nflags\t: x\n"
        self.assertEqual(bench_profile.machine_description(text, 2),
                         "2 cores, Test CPU @ 2.0GHz")
        self.assertEqual(bench_profile.machine_description("", 4), "4 cores, unknown CPU")


class ArgsTest(unittest.TestCase):
    def refused(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            bench_profile.parse_args(argv)
        return err.getvalue()

    def test_defaults_and_refusals(self):
        a = bench_profile.parse_args(["--out", "p.json"])
        self.assertEqual(a.name, "example-cpu")
        self.assertEqual(a.concurrency, [1, 2, 4, 8, 16])
        self.assertEqual(a.prefill_lengths, [128, 512, 1000])
        self.assertEqual(bench_profile.parse_args(["--out", "p", "--group-size", "2"]).name,
                         "example-cpu-tp2")
        self.assertIn("give --startup-seconds",
                      self.refused(["--out", "p", "--url", "http://127.0.0.1:1", "--name", "x"]))
        self.assertIn("--name is required",
                      self.refused(["--out", "p", "--url", "http://127.0.0.1:1",
                                    "--startup-seconds", "60"]))
        self.assertIn("must start at 1", self.refused(["--out", "p", "--concurrency", "2,4"]))
        self.assertIn("--extra-body", self.refused(["--out", "p", "--extra-body", "[1]"]))


if __name__ == "__main__":
    unittest.main()
