"""The README's tour, run as written, so that a README that drifts from the code fails CI.

Every command of README.md's ```sh blocks and every ```python block runs in the README's order,
as a user would type them from the repository's root, with `$T` set to the binary under test
($TESSERA_BIN, the dev build) instead of the release build the README names. Its YAML fragments
are checked by the head (`apply --dry-run`). Nothing is hard-coded but how to run the few kinds
of command a tour has:

- an ordinary command must exit 0 (or the code its comment names: "exit code 2");
- a follow (`logs ... -f`) must end by itself with its output, within a deadline;
- a watch (`-w`, `--watch`, which run until Ctrl-C) must print its first list, then is
  interrupted with SIGINT, as a user would, and must exit at once;
- `source <(...)` runs in bash, which must then know the completion;
- the Python blocks in a row run as one script (the README's names carry from one to the next).

Isolation: the commands run in a temporary copy of the parts of the repository they read
(examples/, python/), so `tessera up` keeps its state in that copy's `.tessera/` and every
process it starts takes a port the kernel picks; a cluster of a developer's own (in the
repository's `.tessera/`) or of another test is never touched. `../shared/traces`, which the
simulator commands read, is linked beside the copy; without it those commands are skipped with
a message. The build and test scripts (`./scripts/demo.sh`, `./scripts/test.sh`) are not run
here: CI runs the second, and the first is this tour on a release build.

Nothing sleeps to wait: each follow and watch reads its output with a deadline.
TESSERA_TOUR_TIMES=1 prints how long each step took (to see where the tour's time goes).
"""
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "dev", "bin", "tessera"))
PYTHON = "/usr/bin/python3"  # Debian's, which has torch
# ../shared beside the repository, as the README's paths say; a work tree elsewhere names it.
SHARED = (os.environ.get("TESSERA_SHARED_DIR")
          or os.path.normpath(os.path.join(REPO, "..", "shared")))

# Commands of the README that are not run here, and why.
NOT_RUN = {
    "./scripts/demo.sh": "builds a release binary and runs the tour's first part; CI runs this",
    "./scripts/test.sh": "is CI itself",
}
# Blocks of the docs that a new user runs as they stand: (page, the heading of the section whose
# first ```sh block it is, the commands that make the cluster the section says it runs on).
DOC_BLOCKS = {
    "reservations": ("docs/reservations.md", "## CLI",
                     ["$T up --generation v6e --topology 4x4 --slices 2"]),
    "ha": ("docs/ha.md", "## A local HA cluster", []),
}
# A command the README's text says follows or watches until interrupted.
WATCH = re.compile(r"\s(-w|--watch)(\s|$)")
FOLLOW = re.compile(r"^\$T logs\s.*\s-f(\s|$)")
EXIT_CODE = re.compile(r"exit code (\d+)")
DOCUMENTS = re.compile(r"(\d+) documents")


def code_blocks(text):
    """[(language, first line number, body)] of the fenced blocks of a Markdown text."""
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        blocks.append((m.group(1), start + 1, "\n".join(lines[start:j])))
        i = j + 1
    return blocks


def split_commands(line):
    """A shell line without its comment, split at the `;` outside quotes."""
    out, cur, quote = [], "", None
    for k, ch in enumerate(line):
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            break
        elif ch == ";":
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [c for c in out if c]


def shell_steps(body, first_line):
    """[(line number, command, the line's comment)] of one sh block; continuations joined."""
    steps, pending, pending_line = [], "", None
    for n, raw in enumerate(body.split("\n"), first_line):
        if pending_line is None:
            pending_line = n
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = pending + raw
        pending = ""
        comment = line.split(" #", 1)[1] if " #" in line else ""
        for command in split_commands(line):
            steps.append((pending_line, command, comment))
        pending_line = None
    return steps


def read_until(proc, done, timeout):
    """Reads proc's stdout until done(text) or the deadline; returns the text read."""
    deadline = time.monotonic() + timeout
    text = b""
    fd = proc.stdout.fileno()
    while not done(text.decode(errors="replace")):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk
    return text.decode(errors="replace")


class ReadmeTourTest(unittest.TestCase):
    def setUp(self):
        self.top = tempfile.mkdtemp(prefix="tessera-tour-")
        self.work = os.path.join(self.top, "repo")
        os.makedirs(self.work)
        for d in ("examples", "python"):
            shutil.copytree(os.path.join(REPO, d), os.path.join(self.work, d),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self.have_traces = os.path.isdir(os.path.join(SHARED, "traces"))
        if self.have_traces:
            os.symlink(SHARED, os.path.join(self.top, "shared"))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TESSERA_SERVER", "TESSERA_TOKEN", "PYTHONPATH")}
        self.env["T"] = TESSERA
        self.log = []  # what ran, for the failure message
        self.page = "README.md"
        self.fragments = []

    def tearDown(self):
        # Whatever happened, nothing of the tour's cluster is left running.
        try:
            subprocess.run([TESSERA, "down", "--purge"], cwd=self.work, env=self.env,
                           capture_output=True, timeout=120)
        finally:
            shutil.rmtree(self.top, ignore_errors=True)

    def run_shell(self, command, timeout):
        return subprocess.run(["bash", "-c", command], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def fail_step(self, where, command, why, out="", err=""):
        self.fail("%s:%d: `%s` %s\nstdout:\n%s\nstderr:\n%s\nsteps so far:\n%s" % (
            self.page, where, command, why, out[-3000:], err[-3000:], "\n".join(self.log[-30:])))

    # The kinds of step.

    def ordinary(self, where, command, comment):
        want = int(EXIT_CODE.search(comment).group(1)) if EXIT_CODE.search(comment) else 0
        # Generous: a step is a real command on a machine shared with the other integration
        # files (a trace replay in the ASan build took over 240 s beside them).
        timeout = 600
        p = self.run_shell(command, timeout)
        if p.returncode != want:
            self.fail_step(where, command, "exited %d, %s says %d" % (p.returncode, self.page,
                                                                      want), p.stdout, p.stderr)
        if want != 0 and not p.stderr.strip():
            self.fail_step(where, command, "failed without saying why", p.stdout, p.stderr)
        m = DOCUMENTS.search(comment)
        if m and len(p.stdout.strip().splitlines()) != int(m.group(1)):
            self.fail_step(where, command, "did not report each of %s documents" % m.group(1),
                           p.stdout, p.stderr)
        return p

    def follow(self, where, command):
        p = self.run_shell(command, 300)
        if p.returncode != 0 or not p.stdout.strip():
            self.fail_step(where, command, "did not follow the log to its end (exit %d)" %
                           p.returncode, p.stdout, p.stderr)
        return p

    def watch(self, where, command, first):
        """Runs a watch until `first(output)` holds, then interrupts it as Ctrl-C would."""
        # A shell that starts a job in the background (CI's harness, `.ci/run &`) ignores SIGINT
        # in it, and an ignored signal stays ignored across exec: the watch would then outlive
        # this Ctrl-C. A terminal gives the command the default disposition; so does this.
        proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=self.work, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            out = read_until(proc, first, 60)
            if not first(out):
                self.fail_step(where, command, "did not print its first list within 60 s", out,
                               proc.stderr.read1().decode(errors="replace")
                               if proc.poll() is not None else "")
            if proc.poll() is not None:
                self.fail_step(where, command, "ended (exit %d) instead of watching" %
                               proc.returncode, out, proc.stderr.read().decode(errors="replace"))
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.fail_step(where, command, "did not exit within 60 s of Ctrl-C (SIGINT)", out,
                               "")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def completion(self, where, command):
        p = self.run_shell(command + " && complete -p tessera", 60)
        if p.returncode != 0 or "tessera" not in p.stdout:
            self.fail_step(where, command, "did not install the completion of `tessera`",
                           p.stdout, p.stderr)

    def python(self, where, script):
        env = dict(self.env, PYTHONPATH="python")
        p = subprocess.run([PYTHON, "-c", script], cwd=self.work, env=env, capture_output=True,
                           text=True, timeout=900)
        if p.returncode != 0:
            self.fail_step(where, "python block", "failed (exit %d)" % p.returncode, p.stdout,
                           p.stderr)

    def yaml_fragments(self, fragments):
        """The README's `spec:` fragments, in a TrainJob the head checks without storing."""
        for where, body in fragments:
            self.assertTrue(body.startswith("spec:"), "%s:%d: a YAML block that is not a spec: "
                            "fragment; teach this test about it" % (self.page, where))
            doc = ("apiVersion: tessera/v1\nkind: TrainJob\nmetadata: {name: tour-fragment}\n"
                   "spec:\n  accelerator: v6e\n  topology: 4x4\n"
                   "  template: {command: [/usr/bin/python3, examples/train/train.py]}\n" +
                   body.split("\n", 1)[1])
            p = subprocess.run([TESSERA, "apply", "--dry-run", "-f", "-"], cwd=self.work,
                               env=self.env, input=doc, capture_output=True, text=True,
                               timeout=60)
            if p.returncode != 0:
                self.fail_step(where, "apply --dry-run of the fragment", "was refused",
                               p.stdout, p.stderr)

    # The tours.

    def run_steps(self, steps, page):
        """Runs [(line, "sh" | "python", text, comment)] of `page` in order."""
        self.page = page
        fragments = self.fragments
        hosts = []
        for where, kind, text, comment in steps:
            if self.log and os.environ.get("TESSERA_TOUR_TIMES"):
                print("%6.1f s  %s" % (time.monotonic() - self.step_start, self.log[-1]))
            self.step_start = time.monotonic()
            self.log.append("%s:%d: %s" % (page, where, text.split("\n")[0]))
            if kind == "python":
                self.python(where, text)
                continue
            command = text
            if command in NOT_RUN:
                self.log[-1] += "  (not run: %s)" % NOT_RUN[command]
                continue
            if command.startswith("T="):
                continue  # $T is the binary under test
            if re.match(r"^\$T (sim|sim-serve)\b", command) and not self.have_traces:
                print("%s tour: skipping `%s`: %s/traces is not present" % (page, command, SHARED))
                continue
            if re.match(r"^\$T down\b", command) and fragments:
                self.yaml_fragments(fragments)
                fragments = []
            if command.startswith("source <("):
                self.completion(where, command)
            elif FOLLOW.search(command):
                self.follow(where, command)
            elif WATCH.search(command):
                if "get hosts" in command:
                    if not hosts:
                        self.fail_step(where, command, "watches before `get hosts` listed any host")
                    first = lambda out: all(h in out for h in hosts)  # noqa: E731
                else:
                    first = lambda out: out.strip() != ""  # noqa: E731
                self.watch(where, command, first)
            else:
                p = self.ordinary(where, command, comment)
                if re.match(r"^\$T get hosts$", command):
                    hosts = re.findall(r"^(slice-\d+-w\d+|cube-\d+-h\d+)\b", p.stdout, re.M)
                    if not hosts:
                        self.fail_step(where, command, "listed no host", p.stdout, p.stderr)
        self.assertEqual(fragments, [], "%s: its YAML was never checked: no `$T down`" % page)

    def test_every_command_of_the_readme_runs_as_written(self):
        with open(os.path.join(REPO, "README.md")) as f:
            blocks = code_blocks(f.read())
        # Manifest fragments are checked while the cluster is up: just before the first `down`.
        self.fragments = [(n, body) for lang, n, body in blocks if lang == "yaml"]
        steps = []  # (line, kind, text, comment)
        for lang, n, body in blocks:
            if lang == "sh":
                steps += [(where, "sh", c, comment) for where, c, comment in shell_steps(body, n)]
            elif lang == "python":
                if steps and steps[-1][1] == "python":
                    steps[-1] = (steps[-1][0], "python", steps[-1][2] + "\n" + body, "")
                else:
                    steps.append((n, "python", body, ""))
        self.assertTrue(any(k == "sh" and c.startswith("$T up ") for _, k, c, _ in steps),
                        "the README's tour starts no cluster")
        self.run_steps(steps, "README.md")

    def doc_block(self, name):
        page, heading, setup = DOC_BLOCKS[name]
        with open(os.path.join(REPO, page)) as f:
            text = f.read()
        self.assertIn("\n" + heading, text, "%s has no section %r any more" % (page, heading))
        at = text.index("\n" + heading)
        first_line = text[:at].count("\n") + 2
        block = [(lang, n + first_line - 1, body)
                 for lang, n, body in code_blocks(text[at + 1:]) if lang == "sh"][0]
        steps = [(0, "sh", c, "") for c in setup]
        for where, command, comment in shell_steps(block[2], block[1]):
            # The docs write the command as it is installed; here it is $T.
            steps.append((where, "sh", re.sub(r"^tessera ", "$T ", command), comment))
        self.fragments = []
        self.run_steps(steps, page)

    def test_the_reservations_cli_block_runs_as_written(self):
        self.doc_block("reservations")

    def test_the_local_ha_cluster_block_runs_as_written(self):
        self.doc_block("ha")


class SourceReadmesTest(unittest.TestCase):
    """docs/architecture.md says every folder of src/ has a README; keep it true."""

    def test_every_source_folder_has_a_readme(self):
        src = os.path.join(REPO, "src")
        missing = [d for d in sorted(os.listdir(src))
                   if os.path.isdir(os.path.join(src, d))
                   and not os.path.isfile(os.path.join(src, d, "README.md"))]
        self.assertEqual(missing, [], "src folders without a README.md (what the folder owns, "
                         "what it may depend on, its entry points)")


if __name__ == "__main__":
    unittest.main()
