"""scripts/device-check.sh end to end, without a GPU: its nvidia-smi is a fake that prints a
recorded `nvidia-smi -q -x` report (src/agent/testdata/discovery/), so the real script starts a
real head and an agent with --devices nvidia, runs its job and reports. Checks that what the
script prints comes from the fixture (every GPU's uuid, through the agent and the head), that
the job's environment is printed, that it stops what it started, and that a report the agent
refuses (a GPU whose NVLink fabric is still in progress) fails the script with the agent's
reason.
"""
import os
import re
import subprocess
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
SCRIPT = os.path.join(REPO, "scripts", "device-check.sh")
FIXTURES = os.path.join(REPO, "src", "agent", "testdata", "discovery")


class DeviceCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="device-check-test.")
        self.addCleanup(self.tmp.cleanup)

    def run_script(self, fixture):
        fake = os.path.join(self.tmp.name, "nvidia-smi")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\ncat '%s'\n" % os.path.join(FIXTURES, fixture))
        os.chmod(fake, 0o755)
        env = dict(os.environ, TESSERA_BIN=TESSERA, NVIDIA_SMI=fake, TMPDIR=self.tmp.name,
                   TIMEOUT="120")
        return subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True,
                              timeout=300)

    def test_an_hgx_host_through_the_head_and_a_job(self):
        out = self.run_script("nvidia-smi-hgx-h100-8gpu.xml")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        with open(os.path.join(FIXTURES, "nvidia-smi-hgx-h100-8gpu.xml")) as f:
            uuids = re.findall(r"<uuid>(.*)</uuid>", f.read())
        self.assertEqual(len(uuids), 8)
        # Each GPU twice: as nvidia-smi lists it, and as the head shows the registered host.
        for u in uuids:
            self.assertEqual(out.stdout.count(u), 2, u + "\n" + out.stdout)
        self.assertIn("source=nvidia-smi answered=true", out.stdout)
        self.assertIn("as v6e 2x4", out.stdout)
        self.assertRegex(out.stdout, r"(?m)^  CUDA_VISIBLE_DEVICES=\S+$")
        self.assertRegex(out.stdout, r"(?m)^  MASTER_PORT=\d+$")
        self.assertRegex(out.stdout, r"(?m)^  RANK=0$")
        self.assertTrue(out.stdout.rstrip().endswith("device-check: ok"), out.stdout)
        self.assert_nothing_left()

    def test_a_fabric_in_progress_is_refused_with_the_agents_reason(self):
        out = self.run_script("nvidia-smi-gb200-nvl72-tray-in-progress.xml")
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("the agent exited", out.stderr)
        self.assertIn("fabric state 'In Progress'", out.stderr)
        self.assert_nothing_left()

    def assert_nothing_left(self):
        """The scratch directory (the head's and the agent's state) is removed, and no process
        started in it (the head, the agent, a worker) is left."""
        self.assertEqual(os.listdir(self.tmp.name), ["nvidia-smi"])
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "device-check." in cmdline and self.tmp.name in cmdline:
                left.append(pid + ": " + cmdline)
        self.assertEqual(left, [])


if __name__ == "__main__":
    unittest.main()
