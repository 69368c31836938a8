"""Tests of bench/gpu_goal_bound.py's necessary condition on hand-checked traces."""
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
        late, (a, b) = gpu_goal_bound.late_jobs_needed(jobs, [False] * 20, 1, H, H, 50)
        self.assertEqual(late, 18)
        self.assertEqual((a, b), (0, 2 * H))
        self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, [False] * 20, 20, H, H, 50),
                         (0, None))

    def test_the_domain_class_has_its_own_deadline(self):
        # Two 2-GPU domain jobs of 10 h on 2 GPUs: one must wait 10 h, over the class's 1 h,
        # though within the overall 100 h.
        jobs = [(0, 10 * H, 2), (0, 10 * H, 2)]
        self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, [True, True], 2, H, 100 * H, 50)[0],
                         1)
        self.assertEqual(
            gpu_goal_bound.late_jobs_needed(jobs, [False, False], 2, H, 100 * H, 50), (0, None))

    def test_a_preempted_job_may_run_around_the_interval(self):
        # On one GPU, a domain job of 6 s due by 10 s and four 1 s jobs submitted at 2 s, due by
        # 8 s: the long job runs 0-2 s and 6-10 s around them (preemption is free), so it must
        # run only 2 s of [2, 8]. A fifth short job is one too many.
        long_job = [(0, 6, 1)]
        for shorts, late in ((4, 0), (5, 1)):
            jobs = long_job + [(2, 1, 1)] * shorts
            domain = [True] + [False] * shorts
            self.assertEqual(gpu_goal_bound.late_jobs_needed(jobs, domain, 1, 4, 5, 50)[0], late)

    def test_thinning_keeps_both_ends(self):
        self.assertEqual(gpu_goal_bound.thin(range(10), 3), [0, 4, 9])
        self.assertEqual(gpu_goal_bound.thin([3, 1, 3], 5), [1, 3])


class CommandLine(unittest.TestCase):
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
        out = self.run_tool("job_id,submission_time,duration,num_gpu\n" + rows, "--gpus", "1",
                            "--domain-gpus", "5-8", "--domain-p95-h", "2", "--all-p95-h", "1")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("the goal lets 1 wait longer", out.stdout)
        self.assertIn("most late jobs an interval needs: 18", out.stdout)
        self.assertIn("no scheduler meets the goal", out.stdout)

    def test_wrong_input_names_the_field(self):
        out = self.run_tool("job_id,submission_time,duration,num_gpu\nj,0,abc,1\n", "--gpus", "1",
                            "--domain-gpus", "5-8", "--domain-p95-h", "2", "--all-p95-h", "1")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(":2: want job_id,submission_time,duration,num_gpu", out.stderr)
        out = self.run_tool("job_id,submission_time,duration,num_gpu\n", "--gpus", "1",
                            "--domain-gpus", "8-5", "--domain-p95-h", "2", "--all-p95-h", "1")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--domain-gpus", out.stderr)
        out = self.run_tool("job_id,submission_time,duration,num_gpu\n", "--gpus", "1",
                            "--domain-gpus", "5-8", "--domain-p95-h", "2", "--all-p95-h", "1")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no jobs", out.stderr)


if __name__ == "__main__":
    unittest.main()
