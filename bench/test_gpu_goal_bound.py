"""Tests of bench/gpu_goal_bound.py's necessary conditions on hand-checked traces."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_goal_bound  # noqa: E402

H = 3600


class LateJobsNeeded(unittest.TestCase):
    def test_twenty_hour_jobs_on_one_gpu_need_eighteen_late(self):
        # Each of 20 jobs must run its hour in [0, 2 h] to wait at most 1 h: 20 h of work in
        # 2 h of one GPU, so 18 must be late; on 20 GPUs none.
        jobs = [(0, H, 1)] * 20
        late, (a, b) = gpu_goal_bound.late_jobs_needed(jobs, [2 * H] * 20, 1, 50)
        self.assertEqual(late, 18)
        self.assertEqual((a, b), (0, 2 * H))
        self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, [2 * H] * 20, 20, 50), (0, None))

    def test_a_preempted_job_may_run_around_the_interval(self):
        # On one GPU, a job of 6 s due by 10 s and four 1 s jobs submitted at 2 s, due by 8 s:
        # the long job runs 0-2 s and 6-10 s around them (preemption is free), so it must run
        # only 2 s of [2, 8]. A fifth short job is one too many.
        for shorts, late in ((4, 0), (5, 1)):
            jobs = [(0, 6, 1)] + [(2, 1, 1)] * shorts
            deadlines = [10] + [8] * shorts
            self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, deadlines, 1, 50)[0], late)

    def test_wide_jobs_count_their_width(self):
        # Two 4-GPU jobs of 1 h due by 1 h on 6 GPUs: 8 GPU-h in 6, one late.
        jobs = [(0, H, 4), (0, H, 4)]
        self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, [H, H], 6, 50)[0], 1)
        self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, [H, H], 8, 50), (0, None))

    def test_thinning_keeps_both_ends(self):
        self.assertEqual(gpu_goal_bound.thin(range(10), 3), [0, 4, 9])
        self.assertEqual(gpu_goal_bound.thin([3, 1, 3], 5), [1, 3])


class GoalChecks(unittest.TestCase):
    def test_the_domain_class_alone_allows_only_its_own_late_jobs(self):
        # Two 8-GPU domain jobs of 10 h, due by 11 h, and 20 small ones on 24 GPUs: the pool fits
        # them all (it allows 1 late: 22 - ceil(20.9)), but one domain runs one at a time, so the
        # class alone needs one late where its 2 jobs allow none (2 - ceil(1.9)). With two
        # domains it needs none.
        jobs = [(0, 10 * H, 8), (0, 10 * H, 8)] + [(0, 60, 1)] * 20
        domain = [True, True] + [False] * 20
        checks = gpu_goal_bound.goal_checks(jobs, domain, 24, 1, H, 100 * H, 50)
        self.assertEqual([(name, late, allowed) for name, late, _, allowed in checks],
                         [("the GPU pool", 0, 1), ("the domain class alone", 1, 0)])
        two = gpu_goal_bound.goal_checks(jobs, domain, 24, 2, H, 100 * H, 50)
        self.assertEqual(two[1][1], 0)

    def test_no_domain_class_no_second_check(self):
        checks = gpu_goal_bound.goal_checks([(0, H, 1)], [False], 1, 1, H, H, 50)
        self.assertEqual([name for name, *_ in checks], ["the GPU pool"])


class CommandLine(unittest.TestCase):
    FLAGS = ("--gpus", "1", "--domains", "1", "--domain-gpus", "5-8", "--domain-p95-h", "2",
             "--all-p95-h", "1")

    def run_tool(self, text, *flags):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            return subprocess.run(
                [sys.executable, gpu_goal_bound.__file__, f.name, *flags],
                capture_output=True, text=True, check=False)
        finally:
            os.unlink(f.name)

    def test_a_verdict_on_a_trace(self):
        rows = "".join(f"j{i},0,3600,1\n" for i in range(20))
        out = self.run_tool("job_id,submission_time,duration,num_gpu\n" + rows, *self.FLAGS)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("the GPU pool: 18 jobs late at least (0.0 h to 2.0 h from the first "
                      "submission); the goal allows 1", out.stdout)
        self.assertNotIn("the domain class alone", out.stdout)
        self.assertTrue(out.stdout.endswith("no scheduler meets the goal\n"), out.stdout)

    def test_wrong_input_names_the_field(self):
        header = "job_id,submission_time,duration,num_gpu\n"
        out = self.run_tool(header + "j,0,abc,1\n", *self.FLAGS)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(":2: want job_id,submission_time,duration,num_gpu", out.stderr)
        flags = list(self.FLAGS)
        flags[5] = "8-5"
        out = self.run_tool(header, *flags)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--domain-gpus", out.stderr)
        out = self.run_tool(header, *self.FLAGS)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no jobs", out.stderr)


if __name__ == "__main__":
    unittest.main()
