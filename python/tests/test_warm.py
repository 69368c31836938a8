"""Tests of tessera._warm, the warm worker process, driven over its channel as the agent does.

Each test starts `python -m tessera._warm` with a Unix socket on fd 0, waits for its ready
line, hands it an assignment and checks what the worker saw and how it exited. No preload of
heavy modules (a stdlib one at most), so they stay fast.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WarmProcess:
    """A warm process and the agent's end of its channel."""

    def __init__(self, preload=None, extra_env=None):
        self.sock, child = socket.socketpair()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SDK_DIR}
        env.update(extra_env or {})
        args = [sys.executable, "-m", "tessera._warm"]
        if preload:
            args += ["--preload", preload]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdin=child.fileno(), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd="/",
                                     start_new_session=True)
        child.close()
        self.sock.settimeout(60)
        self.buffer = b""

    def read_line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def hand(self, command, env, working_dir, log_path):
        message = {"command": command, "env": env, "workingDir": working_dir,
                   "logPath": log_path}
        self.sock.sendall((json.dumps(message) + "\n").encode())
        return self.read_line()

    def wait(self):
        code = self.proc.wait(60)
        self.sock.close()
        self.log.seek(0)
        return code, self.log.read().decode()

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.sock.close()
        self.log.close()


class WarmTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.warm = WarmProcess()
        self.addCleanup(self.warm.kill)
        ready = self.warm.read_line()
        self.assertEqual(ready["ready"], True)
        self.assertEqual(ready["pid"], self.warm.proc.pid)

    def script(self, name, source):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(source)
        return path

    def run_script(self, source, args=(), env=None, working_dir=None):
        path = self.script("job.py", source)
        log = os.path.join(self.dir.name, "worker.log")
        ack = self.warm.hand([sys.executable, path] + list(args), env or {},
                             working_dir or self.dir.name, log)
        self.assertEqual(ack, {"ok": True})
        code, _ = self.warm.wait()
        with open(log) as f:
            return code, f.read()

    def test_the_worker_sees_exactly_its_assignment(self):
        env = {"RANK": "2", "WORLD_SIZE": "4", "PATH": "/usr/bin:/bin",
               "PYTHONPATH": os.path.join(self.dir.name, "lib")}
        code, out = self.run_script(
            "import json, os, sys\n"
            "json.dump({'env': dict(os.environ), 'argv': sys.argv, 'cwd': os.getcwd(),\n"
            "           'stdin': sys.stdin.read(), 'name': __name__, 'path': sys.path[:2],\n"
            "           'pid': os.getpid(), 'pgid': os.getpgid(0),\n"
            "           'fds': sorted(os.listdir('/proc/self/fd'))}, sys.stdout)\n"
            "print()\n"
            "import subprocess\n"
            "print(subprocess.run(['env'], capture_output=True, text=True).stdout.count('\\n'))\n"
            "try:\n"
            "    import tessera\n"
            "    print('sdk visible')\n"
            "except ImportError:\n"
            "    print('sdk hidden')\n",
            args=["--steps", "3"], env=env)
        self.assertEqual(code, 0, out)
        first, env_lines, sdk = out.splitlines()
        seen = json.loads(first)
        self.assertEqual(seen["env"], env)
        self.assertEqual(int(env_lines), len(env))  # children inherit exactly that environment
        self.assertEqual(seen["argv"], [os.path.join(self.dir.name, "job.py"), "--steps", "3"])
        self.assertEqual(seen["cwd"], self.dir.name)
        self.assertEqual(seen["stdin"], "")
        self.assertEqual(seen["name"], "__main__")
        self.assertEqual(seen["path"], [os.path.realpath(self.dir.name),
                                        os.path.join(self.dir.name, "lib")])
        self.assertEqual(seen["pid"], self.warm.proc.pid)
        self.assertEqual(seen["pgid"], self.warm.proc.pid)
        self.assertEqual(len(seen["fds"]), 4, seen["fds"])  # 0, 1, 2 and listdir's own
        # The SDK dir the warm process was started with is not on the worker's path.
        self.assertEqual(sdk, "sdk hidden")

    def test_exit_status_is_that_of_the_script(self):
        code, out = self.run_script("import sys\nprint('bye')\nsys.exit(9)\n")
        self.assertEqual((code, out), (9, "bye\n"))

    def test_an_uncaught_exception_prints_the_users_traceback_and_exits_1(self):
        code, out = self.run_script("def f():\n    raise RuntimeError('boom')\nf()\n")
        self.assertEqual(code, 1)
        self.assertIn("RuntimeError: boom", out)
        self.assertIn('job.py", line 2, in f', out)
        self.assertNotIn("_warm.py", out)
        self.assertNotIn("runpy", out)

    def test_a_death_by_signal_stays_one(self):
        code, _ = self.run_script("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
        self.assertEqual(code, -signal.SIGTERM)

    def test_atexit_and_unbuffered_output(self):
        code, out = self.run_script(
            "import atexit, sys\natexit.register(lambda: print('atexit ran'))\n"
            "print('line', sys.stdout.write_through)\n",
            env={"PYTHONUNBUFFERED": "1"})
        self.assertEqual((code, out), (0, "line True\natexit ran\n"))

    def test_a_module_runs_with_minus_m(self):
        os.makedirs(os.path.join(self.dir.name, "lib", "pkg"))
        self.script("lib/pkg/__init__.py", "")
        self.script("lib/pkg/main.py", "import sys\nprint(__name__, sys.argv[1:])\n")
        log = os.path.join(self.dir.name, "m.log")
        ack = self.warm.hand([sys.executable, "-m", "pkg.main", "a"],
                             {"PYTHONPATH": os.path.join(self.dir.name, "lib")}, self.dir.name,
                             log)
        self.assertEqual(ack, {"ok": True})
        self.assertEqual(self.warm.wait()[0], 0)
        with open(log) as f:
            self.assertEqual(f.read(), "__main__ ['a']\n")

    def test_a_missing_module_or_script_fails_like_the_interpreter(self):
        log = os.path.join(self.dir.name, "m.log")
        self.assertEqual(self.warm.hand([sys.executable, "-m", "no_such_mod_x"], {},
                                        self.dir.name, log), {"ok": True})
        self.assertEqual(self.warm.wait()[0], 1)
        with open(log) as f:
            self.assertIn("No module named no_such_mod_x", f.read())

    def test_a_bad_working_directory_is_refused_before_anything_runs(self):
        ack = self.warm.hand([sys.executable, "x.py"], {}, "/does/not/exist",
                             os.path.join(self.dir.name, "w.log"))
        self.assertEqual(ack["ok"], False)
        self.assertIn("workingDir /does/not/exist", ack["error"])
        self.assertEqual(self.warm.wait()[0], 127)

    def test_a_bad_command_is_refused(self):
        ack = self.warm.hand([sys.executable, "-c", "print(1)"], {}, self.dir.name,
                             os.path.join(self.dir.name, "w.log"))
        self.assertEqual(ack["ok"], False)
        self.assertEqual(self.warm.wait()[0], 127)

    def test_end_of_file_while_waiting_exits_0(self):
        self.warm.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(self.warm.wait()[0], 0)


class PreloadTest(unittest.TestCase):
    def test_preloaded_modules_are_imported_before_ready(self):
        warm = WarmProcess(preload="colorsys,wave")
        self.addCleanup(warm.kill)
        ready = warm.read_line()
        self.assertEqual(ready["preloaded"], ["colorsys", "wave"])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.py")
            with open(path, "w") as f:
                f.write("import sys\nprint('wave' in sys.modules)\n")
            log = os.path.join(d, "l.log")
            self.assertEqual(warm.hand([sys.executable, path], {}, d, log), {"ok": True})
            self.assertEqual(warm.wait()[0], 0)
            with open(log) as f:
                self.assertEqual(f.read(), "True\n")

    def test_a_failing_preload_exits_without_ready(self):
        warm = WarmProcess(preload="no_such_module_for_warm")
        self.addCleanup(warm.kill)
        self.assertIsNone(warm.read_line())
        code, out = warm.wait()
        self.assertEqual(code, 1)
        self.assertIn("No module named 'no_such_module_for_warm'", out)



class ImportTimeEnvironmentTest(unittest.TestCase):
    """A preloaded module that reads the environment at import never runs with a value the
    attempt changed: the handoff is refused and the agent starts the worker cold."""

    def start(self, source, warm_env):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        with open(os.path.join(self.dir.name, "envmod.py"), "w") as f:
            f.write(source)
        env = {"PYTHONPATH": SDK_DIR + os.pathsep + self.dir.name}
        env.update(warm_env)
        warm = WarmProcess(preload="envmod", extra_env=env)
        self.addCleanup(warm.kill)
        self.assertEqual(warm.read_line()["preloaded"], ["envmod"])
        self.script = os.path.join(self.dir.name, "job.py")
        with open(self.script, "w") as f:
            f.write("import envmod, os\nprint(envmod.SEEN, os.environ.get('MODE'))\n")
        self.log = os.path.join(self.dir.name, "job.log")
        return warm

    def test_a_variable_read_at_import_with_another_value_refuses_the_handoff(self):
        warm = self.start("import os\nSEEN = os.environ.get('MODE')\n", {"MODE": "warm"})
        ack = warm.hand([sys.executable, self.script], {"MODE": "attempt-1"}, self.dir.name,
                        self.log)
        self.assertEqual(ack["ok"], False)
        self.assertEqual(ack["cold"], True)
        self.assertIn("MODE", ack["error"])
        self.assertEqual(warm.wait()[0], 0)
        self.assertFalse(os.path.exists(self.log))  # the script never ran

    def test_a_variable_read_at_import_unset_then_and_set_now_refuses_too(self):
        warm = self.start("import os\nSEEN = os.getenv('MODE', 'unset')\n", {})
        ack = warm.hand([sys.executable, self.script], {"MODE": "x"}, self.dir.name, self.log)
        self.assertEqual((ack["ok"], ack.get("cold")), (False, True))

    def test_the_same_value_is_accepted_and_other_variables_may_change(self):
        warm = self.start("import os\nSEEN = os.environ['MODE'] if 'MODE' in os.environ else 0\n",
                          {"MODE": "same", "OTHER": "a"})
        ack = warm.hand([sys.executable, self.script], {"MODE": "same", "OTHER": "b"},
                        self.dir.name, self.log)
        self.assertEqual(ack, {"ok": True})
        self.assertEqual(warm.wait()[0], 0)
        with open(self.log) as f:
            self.assertEqual(f.read(), "same same\n")

    def test_a_module_that_copies_the_environment_read_every_variable(self):
        warm = self.start("import os\nSEEN = len(dict(os.environ))\n", {"MODE": "a"})
        ack = warm.hand([sys.executable, self.script], {"MODE": "a", "NEW": "1"},
                        self.dir.name, self.log)
        self.assertEqual((ack["ok"], ack.get("cold")), (False, True))

    def test_reads_after_the_preload_are_not_recorded(self):
        # The recording ends with the preload: the worker's own reads change nothing.
        warm = self.start("SEEN = 1\n", {"MODE": "a"})
        ack = warm.hand([sys.executable, self.script], {"MODE": "b"}, self.dir.name, self.log)
        self.assertEqual(ack, {"ok": True})
        self.assertEqual(warm.wait()[0], 0)
        with open(self.log) as f:
            self.assertEqual(f.read(), "1 b\n")


if __name__ == "__main__":
    unittest.main()
