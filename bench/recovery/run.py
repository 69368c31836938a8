#!/usr/bin/python3
"""Recovery benchmark: the same training loop under torchrun and under tessera, on this machine.

The loop is examples/train/train.py (PyTorch, gloo, CPU) with STEP_MS of simulated compute per
step and a checkpoint every CKPT steps. Every worker appends its progress, restore and checkpoint
lines (tessera.worker) to a progress file: under tessera the agent's per-worker files, under
torchrun one shared file named by TESSERA_PROGRESS_FILE. All figures come from those lines'
wall-clock timestamps and the benchmark's own clock (same machine), so both launchers are
measured the same way; tessera's head figures (status.attempts[].recovery) are printed beside.

Scenarios (each run prints one JSON line of raw figures; the end prints medians and ratios):
  kill      kill -9 of rank 1 once it has reported --kill-step: time from the kill to the next
            completed step, steps lost (last step before the kill - step resumed from).
  hang      SIGSTOP of rank 1 instead. torchrun at gloo's default 30 min collective timeout
            (waited for at most --hang-cap s, then reported as capped) and with a 20 s timeout;
            tessera with spec.progress.hangTimeout (--hang-timeout): time to detection (head)
            and to the next completed step, and the ranks the head named.
  hostloss  a host dies (its agent and workers, SIGKILL) while the job runs at full size:
            torchrun --nnodes=1:2 with two agents on this machine (the second is killed, process
            group and all), tessera with slices {min: 1, max: 2} and onHostLoss: resize (an
            agent of the second slice and its workers are killed). Time to the shrunk group's
            next step and steps lost; then the host comes back (a new torchrun agent / the same
            tessera agent restarted) after --grow-after-steps steps: time to the first step at
            full size and steps thrown away (completed by the shrunk group after the step the
            full group resumed from).

  bench/recovery/run.py --launcher both --scenario kill --runs 3
  bench/recovery/run.py --launcher tessera --scenario hostloss --runs 3 --tessera build/h-bench/bin/tessera

torchrun is bench/recovery/torchrun.py (Debian's /usr/bin/torchrun fails under Python 3.11,
see that file), c10d rendezvous, --max_restarts, --monitor_interval=0.1.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(REPO, "examples", "train", "train.py")
TORCHRUN = os.path.join(HERE, "torchrun.py")
PYTHON = "/usr/bin/python3"  # Debian's interpreter: the one with python3-torch
POLL_S = 0.05

sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import ApiError, Client  # noqa: E402  (the project's Python client)

# Every process and directory a run made, so Ctrl-C and failures clean up.
_cleanups: list = []


class BenchError(RuntimeError):
    pass


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_for(what, predicate, timeout_s):
    """Polls predicate() until it returns something truthy; raises BenchError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(POLL_S)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(pid, sig=signal.SIGKILL):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------------------------
# Progress lines and the figures computed from them


def read_records(paths):
    records = []
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass  # a line being written right now
        except FileNotFoundError:
            pass
    records.sort(key=lambda r: r["time"])
    return records


def max_step(records, rank=None, since=0.0):
    steps = [r["step"] for r in records if r["type"] == "progress" and r["time"] > since
             and (rank is None or r["rank"] == rank)]
    return max(steps, default=0)


def group_after(records, t, min_rank=None):
    """The first group started after time t: its restore lines (the earliest one marks its
    start), the step it resumed from, and its progress lines. min_rank: only a group that has a
    rank >= min_rank (a group at full size). None if no such group has restored yet."""
    restores = [r for r in records if r["type"] == "restore" and r["time"] > t]
    if min_rank is not None:
        big = [r for r in restores if r["rank"] >= min_rank]
        if not big:
            return None
        # The full group's restores are those at or after its first rank >= min_rank restore,
        # less the span of one restore round (ranks restore within a second of each other).
        first_big = big[0]["time"]
        restores = [r for r in restores if r["time"] >= first_big - 5.0
                    and r["step"] == big[0]["step"]]
    if not restores:
        return None
    start = restores[0]["time"]
    progress = [r for r in records if r["type"] == "progress" and r["time"] > start]
    return {"start": start, "resumed_from": restores[0]["step"], "restores": restores,
            "progress": progress}


def recovery_figures(records, fault_t, min_rank=None, full_world=None):
    """Figures of the first group after fault_t, once its first step is reported by every rank
    (full_world ranks, or as many as restored). None until then."""
    g = group_after(records, fault_t, min_rank)
    if g is None or not g["progress"]:
        return None
    first = g["progress"][0]
    ranks_restored = {r["rank"] for r in g["restores"]}
    world = full_world or len(ranks_restored)
    first_step_ranks = {r["rank"] for r in g["progress"] if r["step"] == first["step"]}
    if len(first_step_ranks) < world:
        return None
    before = [r for r in records if r["type"] == "progress" and r["time"] <= fault_t]
    last_before = max((r["step"] for r in before), default=0)
    # The old group's last step: what it completed before the new group started (a hang or a
    # grow-back leaves the old group running after fault_t).
    old_last = max((r["step"] for r in records if r["type"] == "progress"
                    and r["time"] < g["start"]), default=0)
    return {
        "next_step_s": round(first["time"] - fault_t, 3),
        "restart_s": round(g["start"] - fault_t, 3),  # fault -> first restore line
        "restore_s": round(max(r["seconds"] for r in g["restores"]), 3),
        "first_step_after_restore_s": round(first["time"] - g["start"], 3),
        "last_step_before": last_before,
        "old_group_last_step": old_last,
        "resumed_from": g["resumed_from"],
        "steps_lost": old_last - g["resumed_from"],
        "world_after": len(first_step_ranks),
        "first_step": first["step"],
    }


# ---------------------------------------------------------------------------------------------
# torchrun


def train_env(cfg, steps, progress_file, ckpt_dir, dist_timeout_s):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("TESSERA_", "TORCHELASTIC_")) or k in ("RANK", "WORLD_SIZE",
                                                                "MASTER_ADDR", "MASTER_PORT"):
            del env[k]
    env.update(PYTHONPATH=os.path.join(REPO, "python"), STEPS=str(steps),
               CKPT_EVERY=str(cfg.ckpt_every), STEP_MS=str(cfg.step_ms),
               DIST_TIMEOUT_SECONDS=str(dist_timeout_s), KEEP_CHECKPOINTS="3",
               WAIT_FOR_MASTER="0" if cfg.no_wait_for_master else "1",
               TESSERA_PROGRESS_FILE=progress_file, TESSERA_CHECKPOINT_DIR=ckpt_dir)
    return env


class TorchrunAgent:
    """One torchrun agent (a "node"), in its own session so a kill of its process group takes
    its workers with it."""

    def __init__(self, workdir, name, nnodes, nproc, rdzv_port, run_id, env, rdzv_conf=None):
        self.name = name
        self.log_path = os.path.join(workdir, f"torchrun-{name}.log")
        cmd = [PYTHON, TORCHRUN, f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
               "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{rdzv_port}",
               f"--rdzv_id={run_id}", "--max_restarts=3", "--monitor_interval=0.1"]
        if rdzv_conf:
            cmd.append(f"--rdzv_conf={rdzv_conf}")
        cmd.append(TRAIN)
        self.cmd = cmd
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _cleanups.append(lambda p=self.proc: (kill_group(p.pid), p.wait()))

    def worker_pid(self, rank):
        """pid of this agent's live worker with RANK=rank (from /proc), or None."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                if ppid != self.proc.pid:
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            except (OSError, ValueError):
                continue
            if env.get(b"RANK") == str(rank).encode():
                return int(entry)
        return None

    def kill(self):
        kill_group(self.proc.pid)
        self.proc.wait()


def torchrun_run(cfg, scenario, variant, run_index):
    workdir = tempfile.mkdtemp(prefix=f"tessera-recovery-torchrun-{scenario}-")
    _cleanups.append(lambda: None if cfg.keep else shutil.rmtree(workdir, ignore_errors=True))
    progress = os.path.join(workdir, "progress.jsonl")
    ckpt = os.path.join(workdir, "ckpt")
    records = lambda: read_records([progress])  # noqa: E731
    dist_timeout = {"default": 1800, "timeout20": 20}.get(variant, 60)
    run_id = f"bench-{scenario}-{run_index}"
    port = free_port()
    out = {"launcher": "torchrun", "variant": variant, "scenario": scenario, "run": run_index,
           "loadavg_1m": os.getloadavg()[0]}

    if scenario in ("kill", "hang"):
        world = cfg.world
        steps = cfg.kill_step + 15
        env = train_env(cfg, steps, progress, ckpt, dist_timeout)
        agent = TorchrunAgent(workdir, "a", "1", world, port, run_id, env)
        wait_for(f"rank 1 at step {cfg.kill_step}",
                 lambda: max_step(records(), rank=1) >= cfg.kill_step, 600)
        pid = agent.worker_pid(1)
        if pid is None:
            raise BenchError("rank 1's process not found")
        t = time.time()
        os.kill(pid, signal.SIGKILL if scenario == "kill" else signal.SIGSTOP)
        log(f"torchrun {scenario}: rank 1 (pid {pid}) signalled at step "
            f"{max_step(records())}")
        cap = cfg.hang_cap_s if scenario == "hang" else 600
        try:
            fig = wait_for("the next completed step",
                           lambda: recovery_figures(records(), t, full_world=world), cap)
        except BenchError:
            if scenario != "hang":
                raise
            fig = {"next_step_s": None, "capped_at_s": cap}
            agent.kill()
        out.update(fig, world=world)
        if fig.get("next_step_s") is not None:
            wait_for("torchrun to finish", lambda: agent.proc.poll() is not None, 300)
            out["exit_code"] = agent.proc.returncode
        agent.kill()
        return out

    # hostloss: two agents of world/2 workers each, --nnodes=1:2; the second one dies.
    world = cfg.hostloss_world
    half = world // 2
    conf = "last_call_timeout=1" if variant == "tuned" else None
    steps = 100000
    env = train_env(cfg, steps, progress, ckpt, 60)
    TorchrunAgent(workdir, "a", "1:2", half, port, run_id, env, conf)
    # The first agent hosts the c10d store; the second must find it listening.
    wait_for("agent a's rendezvous store", lambda: _listening(port), 120)
    b = TorchrunAgent(workdir, "b", "1:2", half, port, run_id, env, conf)
    wait_for(f"full world at step {cfg.kill_step}",
             lambda: max_step(records(), rank=world - 1) >= cfg.kill_step, 600)
    t = time.time()
    b.kill()  # the whole process group: the agent and its workers, like a host crash
    log(f"torchrun hostloss: agent b killed at step {max_step(records())}")
    shrink = wait_for("the shrunk group's next step",
                      lambda: recovery_figures(records(), t), 600)
    out.update({f"shrink_{k}": v for k, v in shrink.items()})
    target = shrink["first_step"] + cfg.grow_after_steps
    wait_for(f"shrunk group at step {target}", lambda: max_step(records()) >= target, 600)
    g = time.time()
    TorchrunAgent(workdir, "b2", "1:2", half, port, run_id, env, conf)
    log(f"torchrun hostloss: agent b2 started at step {max_step(records())}")
    grow = wait_for("the first step at full size",
                    lambda: recovery_figures(records(), g, min_rank=half, full_world=world), 600)
    out.update({f"grow_{k}": v for k, v in grow.items()})
    out["world"] = world
    return out


def _listening(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------------------------------------
# tessera


class TesseraCluster:
    """A local cluster from `tessera up`, torn down with `tessera down --purge`."""

    def __init__(self, cfg, slices):
        self.cfg = cfg
        self.dir = tempfile.mkdtemp(prefix="tessera-recovery-cluster-")
        self.extra_agents = []
        cmd = [cfg.tessera, "up", "--generation", "v6e", "--topology", "4x4", "--slices",
               str(slices), "--state-dir", self.dir, "--timeout", "120"]
        if cfg.warm and not cfg.warm_spec:
            cmd += ["--warm-preload", "torch"]
        if cfg.refill_delay_ms is not None:
            cmd += ["--warm-refill-delay-ms", str(cfg.refill_delay_ms)]
        _cleanups.append(self.down)
        log(" ".join(cmd[1:]))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.dir, "head.json")) as f:
            head = json.load(f)
        self.url = f"{head.get('scheme', 'http')}://127.0.0.1:{head['port']}"
        with open(os.path.join(self.dir, "admin.token")) as f:
            self.token = f.read().strip()
        self.client = Client(self.url, self.token, timeout=10,
                             ca_file=os.path.join(self.dir, "ca.crt"))

    def job(self, name):
        return self.client.get("job", name)

    def delete(self, name):
        try:
            self.client.delete("job", name)
        except ApiError as e:
            if e.status != 404:
                raise

        def gone():
            try:
                self.job(name)
                return False
            except ApiError as e:
                return e.status == 404
        wait_for(f"job {name} deleted", gone, 120)

    def progress_paths(self, job):
        # <agent state>/progress/<job>/<uid>/<attempt>/worker-<rank>.jsonl
        return glob.glob(os.path.join(self.dir, "agents", "*", "progress", job, "**", "*.jsonl"),
                         recursive=True)

    def agent_pid(self, host):
        with open(os.path.join(self.dir, "cluster.json")) as f:
            pids = json.load(f)["agents"]
        # Agents restarted by an earlier kill-host run are not in cluster.json.
        pids = [p.pid for p in self.extra_agents if p.poll() is None] + pids
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if host.encode() in args:
                return pid, [a.decode() for a in args if a]
        raise BenchError(f"no agent for host {host}")

    def restart_agent(self, args):
        with open(os.path.join(self.dir, "logs", f"agent-restarted-{len(self.extra_agents)}.log"),
                  "ab") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.extra_agents.append(p)
        return p

    def down(self):
        for p in self.extra_agents:  # not in cluster.json: stop them like `down` would
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    kill_group(p.pid)
                    p.wait()
        self.extra_agents = []
        if os.path.isdir(self.dir):
            subprocess.run([self.cfg.tessera, "down", "--state-dir", self.dir, "--purge"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tessera_job_doc(cfg, name, ckpt, steps, slices, on_host_loss, mode="disk"):
    env = {"PYTHONPATH": os.path.join(REPO, "python"), "STEPS": str(steps),
           "CKPT_EVERY": str(cfg.ckpt_every), "STEP_MS": str(cfg.step_ms),
           "DIST_TIMEOUT_SECONDS": "60", "KEEP_CHECKPOINTS": "3",
           "WAIT_FOR_MASTER": "0" if cfg.no_wait_for_master else "1"}
    return {
        "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
        "spec": {
            "accelerator": "v6e", "topology": "4x4", "slices": slices,
            "failurePolicy": dict(
                {"maxFailures": -1, "onHostLoss": on_host_loss},
                **({"growBackInterval": f"{cfg.grow_back_interval_s}s"}
                   if cfg.grow_back_interval_s else {})),
            "progress": {"hangTimeout": f"{cfg.hang_timeout_s}s"},
            "checkpoint": dict({"dir": ckpt}, **({"inMemory": {
                "everySteps": cfg.mem_every, "peerCopies": cfg.mem_peer_copies,
                "maxBytesPerHost": cfg.mem_max_bytes}} if mode == "memory" else {})),
            **({"warmStart": {"preload": ["torch"]}} if cfg.warm_spec else {}),
            "template": {"command": [PYTHON, TRAIN], "env": env, "workingDir": REPO},
        },
    }


def worker_attempt_figures(records):
    """Per attempt, from the workers' own lines: the last step any rank completed (-1: none)
    and the step every rank resumed from (None: no restore line)."""
    out = {}
    for r in records:
        a = out.setdefault(r.get("attempt", 0), {"last_step": -1, "resumed_from": None})
        if r["type"] == "progress":
            a["last_step"] = max(a["last_step"], r["step"])
        elif r["type"] == "restore":
            if a["resumed_from"] is not None and a["resumed_from"] != r["step"]:
                raise BenchError(f"attempt {r.get('attempt')}: ranks resumed from different "
                                 f"steps ({a['resumed_from']} and {r['step']})")
            a["resumed_from"] = r["step"]
    return out


def check_head_figures(attempts, records, ended_only=False):
    """Raises BenchError unless the head's lastStep and resumedFromStep of every attempt, and
    recovery.stepsLost of every attempt after a failure, equal what the workers' lines show.
    ended_only: skip the last attempt's lastStep (it is still running). Returns the checked
    figures."""
    workers = worker_attempt_figures(records)
    none = {"last_step": -1, "resumed_from": None}
    problems, checked = [], []
    for i, a in enumerate(attempts):
        w = workers.get(a.get("attempt"), none)
        current = ended_only and i == len(attempts) - 1
        if not current and a.get("lastStep") != w["last_step"]:
            problems.append(f"attempt {a.get('attempt')}: head lastStep {a.get('lastStep')}, "
                            f"workers {w['last_step']}")
        if w["resumed_from"] is not None and a.get("resumedFromStep") != w["resumed_from"]:
            problems.append(f"attempt {a.get('attempt')}: head resumedFromStep "
                            f"{a.get('resumedFromStep')}, workers {w['resumed_from']}")
        lost = a.get("recovery", {}).get("stepsLost")
        if i > 0 and lost is not None and w["resumed_from"] is not None:
            prev = workers.get(attempts[i - 1].get("attempt"), none)
            expected = max(0, prev["last_step"] - w["resumed_from"])
            if lost != expected:
                problems.append(f"attempt {a.get('attempt')}: head stepsLost {lost}, workers "
                                f"{expected} ({prev['last_step']} - {w['resumed_from']})")
            checked.append(expected)
    if problems:
        raise BenchError("the head's figures disagree with the workers' lines: " +
                         "; ".join(problems))
    return {"head_matches_workers": True, "steps_lost_checked": checked}


def head_attempts(cluster, name):
    """status.attempts[] of the job, with only the fields the tables use."""
    st = cluster.job(name).get("status", {})
    keep = ("attempt", "slices", "resumedFromStep", "lastStep", "endReason", "failedRanks",
            "failureMs", "detectedMs", "firstStepMs", "recovery")
    return [{k: a[k] for k in keep if k in a} for a in st.get("attempts", [])]


def tessera_wait(cluster, name, what, predicate, timeout_s):
    """wait_for that also fails at once when the job ends or has no attempts in its status."""
    last_check = [0.0]

    def check():
        value = predicate()
        if value:
            return value
        if time.monotonic() - last_check[0] > 1.0:
            last_check[0] = time.monotonic()
            st = cluster.job(name).get("status", {})
            if st.get("phase") in ("Succeeded", "Failed"):
                raise BenchError(f"job {name} ended ({st.get('phase')}: {st.get('reason')} "
                                 f"{st.get('message')}) while waiting for {what}; "
                                 "is the controller's recovery in this build?")
        return None
    return wait_for(what, check, timeout_s)


def check_recovery_support(cluster, name):
    st = cluster.job(name).get("status", {})
    if "attempts" not in st:
        raise BenchError("this head reports no status.attempts: the controller's recovery "
                         "(attempts, restart from checkpoint) is not in this build")


def settled_head_attempts(cluster, name, count):
    """head_attempts once the first `count` attempts after the first have their recovery
    figures (the head learns of steps through heartbeats, up to a second late); whatever it has
    after 15 s otherwise."""
    def settled():
        a = head_attempts(cluster, name)
        done = [x for x in a[1:count + 1]
                if x.get("recovery", {}).get("timeToRecoverMs", -1) >= 0]
        return a if len(done) >= count else None
    try:
        return wait_for("the head's recovery figures", settled, 15)
    except BenchError:
        return head_attempts(cluster, name)


def worker_of(cluster, name, rank):
    for w in cluster.job(name).get("status", {}).get("workers", []):
        if w.get("rank") == rank and w.get("pid"):
            return w
    return None


def kill_keepers(ckpt, host=None):
    """SIGKILLs the in-memory checkpoint keepers registered in a job's checkpoint directory
    (tessera.peer_ckpt), only `host`'s when given. Returns their pids."""
    root = os.path.join(ckpt, ".tessera-peer", "keepers")
    pids = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.endswith((".lock", ".log")) or name.startswith(".tmp-"):
            continue
        try:
            with open(os.path.join(root, name)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if host is not None and doc.get("host") != host:
            continue
        try:
            os.kill(doc["pid"], signal.SIGKILL)
            pids.append(doc["pid"])
        except (ProcessLookupError, PermissionError, KeyError, TypeError):
            pass
    return pids


def step_ms_before(records, first, last):
    """Median time between consecutive steps first..last of rank 0 (the first attempt's)."""
    times = {}
    for r in records:
        if r["type"] == "progress" and r["rank"] == 0 and r.get("attempt", 0) == 0:
            times.setdefault(r["step"], r["time"])
    gaps = [(times[s] - times[s - 1]) * 1000 for s in range(first + 1, last + 1)
            if s in times and s - 1 in times]
    return round(statistics.median(gaps), 2) if gaps else None


def tessera_run(cfg, cluster, scenario, run_index, mode="disk"):
    name = f"recovery-{scenario}-{run_index}" + ("-mem" if mode == "memory" else "")
    ckpt = os.path.join(cluster.dir, "ckpt", name)
    records = lambda: read_records(cluster.progress_paths(name))  # noqa: E731
    variant = ("warm (spec.warmStart)" if cfg.warm_spec else "warm" if cfg.warm else "cold") + (
        f", growBackInterval {cfg.grow_back_interval_s}s" if cfg.grow_back_interval_s else "") + (
        f", in-memory every {cfg.mem_every}" if mode == "memory" else
        (", disk only" if len(cfg.modes) > 1 else ""))
    out = {"launcher": "tessera", "variant": variant, "ckpt_mode": mode,
           "scenario": scenario, "run": run_index, "loadavg_1m": os.getloadavg()[0]}
    _cleanups.append(lambda: kill_keepers(ckpt))

    if scenario in ("kill", "hang"):
        world = 4  # one v6e 4x4 slice: 4 hosts, one worker each
        steps = cfg.kill_step + 15
        cluster.client.apply(tessera_job_doc(cfg, name, ckpt, steps, 1, "fail", mode))
        check_recovery_support(cluster, name)
        wait_for(f"rank 1 at step {cfg.kill_step}",
                 lambda: max_step(records(), rank=1) >= cfg.kill_step, 600)
        w = worker_of(cluster, name, 1)
        if w is None:
            raise BenchError("rank 1's pid not in the job status")
        t = time.time()
        os.kill(w["pid"], signal.SIGKILL if scenario == "kill" else signal.SIGSTOP)
        log(f"tessera {scenario}: rank 1 (pid {w['pid']} on {w['host']}) signalled at step "
            f"{max_step(records())}")
        fig = tessera_wait(cluster, name, "the next completed step",
                           lambda: recovery_figures(records(), t, full_world=world),
                           cfg.timeout_s)
        out.update(fig, world=world)
        out["fault_ms"] = int(t * 1000)
        out["step_ms"] = step_ms_before(records(), 5, cfg.kill_step)
        def ended():
            phase = cluster.job(name)["status"]["phase"]
            return phase if phase in ("Succeeded", "Failed") else None
        out["phase"] = wait_for("the job to end", ended, 300)
        # Once the job ended every line of every attempt has reached the head.
        out["head_attempts"] = head_attempts(cluster, name)
        if scenario == "hang":
            first = out["head_attempts"][0] if out["head_attempts"] else {}
            if first.get("detectedMs"):
                out["detect_s"] = round(first["detectedMs"] / 1000 - t, 3)
            out["failed_ranks"] = first.get("failedRanks")
            out["named_the_stopped_rank"] = first.get("failedRanks") == [1]
        out.update(check_head_figures(out["head_attempts"], records()))
        cluster.delete(name)
        kill_keepers(ckpt)  # a job that ended stops its keepers itself; one that failed may not
        return out

    # hostloss: two 4x4 slices at full size (8 workers), slices {min: 1, max: 2}, resize.
    world = 8
    cluster.client.apply(tessera_job_doc(cfg, name, ckpt, 100000, {"min": 1, "max": 2},
                                         "resize", mode))
    check_recovery_support(cluster, name)
    wait_for(f"full world at step {cfg.kill_step}",
             lambda: max_step(records(), rank=world - 1) >= cfg.kill_step, 600)
    host = worker_of(cluster, name, world - 3)["host"]  # rank 5: slice 1, worker 1
    agent_pid, agent_args = cluster.agent_pid(host)
    worker_pids = [w["pid"] for w in cluster.job(name)["status"]["workers"]
                   if w["host"] == host and w.get("pid")]
    t = time.time()
    if cfg.host_fault == "kill-host":
        os.kill(agent_pid, signal.SIGKILL)
        for pid in worker_pids:  # each worker leads its own process group
            kill_group(pid)
        # The host's memory goes with it: its in-memory checkpoint keeper (tessera.peer_ckpt).
        out["keepers_killed"] = kill_keepers(ckpt, host)
    else:  # stop-agent: the host stops heartbeating; its workers run on until the head acts
        os.kill(agent_pid, signal.SIGSTOP)
    out["host_fault"] = cfg.host_fault
    log(f"tessera hostloss: host {host} (agent {agent_pid}, workers {worker_pids}): "
        f"{cfg.host_fault} at step {max_step(records())}")
    shrink = tessera_wait(cluster, name, "the shrunk group's next step",
                          lambda: recovery_figures(records(), t), cfg.timeout_s)
    out.update({f"shrink_{k}": v for k, v in shrink.items()})
    out["step_ms"] = step_ms_before(records(), 5, cfg.kill_step)
    target = shrink["first_step"] + cfg.grow_after_steps
    wait_for(f"shrunk group at step {target}", lambda: max_step(records()) >= target, 600)
    g = time.time()
    if cfg.host_fault == "kill-host":
        cluster.restart_agent(agent_args)
    else:
        os.kill(agent_pid, signal.SIGCONT)
    log(f"tessera hostloss: host {host} back at step {max_step(records())}")
    grow = tessera_wait(cluster, name, "the first step at full size",
                        lambda: recovery_figures(records(), g, min_rank=4, full_world=world),
                        cfg.timeout_s)
    out.update({f"grow_{k}": v for k, v in grow.items()})
    out["world"] = world
    out["fault_ms"], out["grow_ms"] = int(t * 1000), int(g * 1000)
    out["head_attempts"] = settled_head_attempts(cluster, name, 2)
    # The ended attempts' figures are final once the next attempt is placed (every line of
    # theirs came before their hosts confirmed the stop); the last one is still running.
    out.update(check_head_figures(out["head_attempts"], records(), ended_only=True))
    cluster.delete(name)
    kill_keepers(ckpt)  # deleted while running: nobody told its keepers to exit
    return out


# ---------------------------------------------------------------------------------------------
# Driver and tables

METRICS = {
    "kill": [("next_step_s", "kill -> next completed step (s)"),
             ("steps_lost", "steps lost"),
             ("step_ms", "step time before the fault (ms)")],
    "hang": [("next_step_s", "SIGSTOP -> next completed step (s)"),
             ("detect_s", "SIGSTOP -> detected by the head (s)")],
    "hostloss": [("shrink_next_step_s", "host killed -> shrunk group's next step (s)"),
                 ("shrink_steps_lost", "steps lost at the shrink"),
                 ("shrink_world_after", "world after the shrink"),
                 ("grow_next_step_s", "host back -> first step at full size (s)"),
                 ("grow_steps_lost", "steps thrown away at the grow-back"),
                 ("step_ms", "step time before the fault (ms)")],
}

VARIANTS = {
    ("torchrun", "kill"): ["default"],
    ("torchrun", "hang"): ["default", "timeout20"],
    ("torchrun", "hostloss"): ["default", "tuned"],
}


def fmt(values, capped=None):
    vals = [v for v in values if v is not None]
    if capped:
        return f"> {capped:.0f} s (capped)"
    if not vals:
        return "-"
    m = statistics.median(vals)
    return f"{m:.2f}" if isinstance(m, float) and not float(m).is_integer() else f"{m:g}"


def table(results):
    lines = ["| scenario | figure | launcher (variant) | median | runs | tessera / torchrun |",
             "|---|---|---|---|---|---|"]
    for scenario, metrics in METRICS.items():
        rows = [r for r in results if r["scenario"] == scenario]
        if not rows:
            continue
        groups = {}
        for r in rows:
            groups.setdefault((r["launcher"], r["variant"]), []).append(r)
        for key, label in metrics:
            medians = {}
            for (launcher, variant), runs in groups.items():
                vals = [r.get(key) for r in runs]
                capped = next((r["capped_at_s"] for r in runs if r.get("capped_at_s")), None) \
                    if key == "next_step_s" and all(v is None for v in vals) else None
                if all(v is None for v in vals) and not capped:
                    continue
                present = [v for v in vals if v is not None]
                medians[(launcher, variant)] = (statistics.median(present) if present
                                                else ("capped", capped))
                raw = ", ".join("capped" if v is None else f"{v:g}" for v in vals)
                lines.append(f"| {scenario} | {label} | {launcher} ({variant}) | "
                             f"{fmt(vals, capped)} | {raw} | |")
            tess = [v for (l, _), v in medians.items()
                    if l == "tessera" and isinstance(v, (int, float))]
            for (launcher, variant), v in medians.items():
                if launcher != "torchrun" or not tess:
                    continue
                if isinstance(v, tuple):  # torchrun never recovered within the cap
                    ratio = f"< {tess[0] / v[1]:.3f}"
                elif v:
                    ratio = f"{tess[0] / v:.3f}"
                else:
                    continue
                lines.append(f"| {scenario} | {label} | ratio vs torchrun ({variant}) | | | "
                             f"{ratio} |")
    return "\n".join(lines)


def mode_table(results):
    """In-memory against disk-only (tessera runs of one invocation): medians and ratios."""
    lines = ["| scenario | figure | disk only | in-memory | in-memory / disk only |",
             "|---|---|---|---|---|"]
    for scenario, metrics in METRICS.items():
        by_mode = {m: [r for r in results if r["scenario"] == scenario and r["launcher"] ==
                       "tessera" and r.get("ckpt_mode") == m] for m in ("disk", "memory")}
        if not by_mode["disk"] or not by_mode["memory"]:
            continue
        for key, label in metrics:
            med = {}
            for m, runs in by_mode.items():
                vals = [r[key] for r in runs if r.get(key) is not None]
                med[m] = (statistics.median(vals), vals) if vals else None
            if not med["disk"] or not med["memory"]:
                continue
            ratio = (f"{med['memory'][0] / med['disk'][0]:.3f}" if med["disk"][0] else "-")
            raw = lambda m: f"{med[m][0]:g} ({', '.join(f'{v:g}' for v in med[m][1])})"  # noqa
            lines.append(f"| {scenario} | {label} | {raw('disk')} | {raw('memory')} | {ratio} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def run_all(cfg, errors):
    results = []
    launchers = ["torchrun", "tessera"] if cfg.launcher == "both" else [cfg.launcher]
    scenarios = ["kill", "hang", "hostloss"] if cfg.scenario == "all" else [cfg.scenario]
    for scenario in scenarios:
        for launcher in launchers:
            if launcher == "torchrun":
                variants = cfg.variants or VARIANTS[("torchrun", scenario)]
                for variant in variants:
                    for i in range(1, cfg.runs + 1):
                        log(f"== torchrun {scenario} ({variant}) run {i}/{cfg.runs}")
                        try:
                            r = torchrun_run(cfg, scenario, variant, i)
                        except BenchError as e:
                            log(f"torchrun {scenario} ({variant}) run {i} failed: {e}")
                            errors.append(f"torchrun {scenario} ({variant}) run {i}: {e}")
                            break
                        finally:
                            _run_cleanups()
                        print(json.dumps(r), flush=True)
                        results.append(r)
            else:
                cluster = TesseraCluster(cfg, 2 if scenario == "hostloss" else 1)
                try:
                    for i in range(1, cfg.runs + 1):
                        for mode in cfg.modes:  # side by side: each run in every mode
                            log(f"== tessera {scenario} ({mode}) run {i}/{cfg.runs}")
                            r = tessera_run(cfg, cluster, scenario, i, mode)
                            print(json.dumps(r), flush=True)
                            results.append(r)
                except BenchError as e:
                    log(f"tessera {scenario} run {i} failed: {e}")
                    try:
                        st = cluster.job(f"recovery-{scenario}-{i}").get("status", {})
                        log("job status: " + json.dumps(
                            {k: st.get(k) for k in ("phase", "reason", "message", "attempt",
                                                    "workers", "attempts")}))
                    except Exception as e2:  # the head may be gone; the error above stands
                        log(f"job status unavailable: {e2!r}")
                    errors.append(f"tessera {scenario} run {i}: {e}")
                finally:
                    if not cfg.keep:
                        cluster.down()
                    _run_cleanups()
    return results


def _run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as e:  # cleanup must go on
            log(f"cleanup: {e!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", choices=["torchrun", "tessera", "both"], default="both")
    p.add_argument("--scenario", choices=["kill", "hang", "hostloss", "all"], default="kill")
    p.add_argument("--variants", default="",
                   help="torchrun variants, comma list: default, timeout20 (hang), tuned "
                        "(hostloss: --rdzv_conf=last_call_timeout=1); default: all of the "
                        "scenario's")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--world", type=int, default=4, help="kill/hang world size (torchrun)")
    p.add_argument("--hostloss-world", type=int, default=8,
                   help="hostloss world size at full size (torchrun: 2 agents of half each; "
                        "tessera: 2 v6e 4x4 slices = 8)")
    p.add_argument("--step-ms", type=int, default=100, help="simulated compute per step")
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--kill-step", type=int, default=35,
                   help="fault once rank 1 (hostloss: the last rank) reported this step")
    p.add_argument("--grow-after-steps", type=int, default=15,
                   help="hostloss: steps the shrunk group takes before the host comes back")
    p.add_argument("--hang-cap", dest="hang_cap_s", type=float, default=600)
    p.add_argument("--hang-timeout", dest="hang_timeout_s", type=int, default=10,
                   help="tessera spec.progress.hangTimeout, seconds")
    p.add_argument("--timeout", dest="timeout_s", type=float, default=600,
                   help="tessera: seconds to wait for each recovery before the run fails")
    p.add_argument("--grow-back-interval", dest="grow_back_interval_s", type=int, default=0,
                   help="tessera spec.failurePolicy.growBackInterval, seconds (0: the head's "
                        "default, 60 s)")
    p.add_argument("--host-fault", choices=["stop-agent", "kill-host"], default="stop-agent",
                   help="tessera hostloss: SIGSTOP the host's agent (SIGCONT to bring it back; "
                        "its workers run on until the head stops the job), or SIGKILL the "
                        "agent and its workers (a new agent process brings it back)")
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "h-bench", "bin", "tessera"))
    p.add_argument("--warm", action="store_true",
                   help="tessera up --warm-preload torch (pre-started workers, torch imported)")
    p.add_argument("--refill-delay-ms", type=int, default=None,
                   help="tessera up --warm-refill-delay-ms: start a handed-out warm process's "
                        "replacement this long after the handoff (default: the agent's, 0)")
    p.add_argument("--no-wait-for-master", action="store_true",
                   help="train.py WAIT_FOR_MASTER=0: ranks connect to rank 0's store at once "
                        "(the behaviour before tessera.rendezvous; for the before/after figure)")
    p.add_argument("--warm-spec", action="store_true",
                   help="the job asks for warm restarts itself: spec.warmStart: {preload: "
                        "[torch]} (agents without --warm-preload)")
    p.add_argument("--modes", default="disk",
                   help="tessera: checkpoint modes to run side by side, comma list: disk (disk "
                        "checkpoints only), memory (spec.checkpoint.inMemory as well); each run "
                        "index runs every mode in turn on the same cluster")
    p.add_argument("--mem-every", type=int, default=1, help="inMemory.everySteps")
    p.add_argument("--mem-peer-copies", type=int, default=1, help="inMemory.peerCopies")
    p.add_argument("--mem-max-bytes", default="1Gi", help="inMemory.maxBytesPerHost")
    p.add_argument("--keep", action="store_true", help="keep work directories")
    p.add_argument("--json", help="also write every run's figures to this file")
    p.add_argument("--table", nargs="+", metavar="JSON",
                   help="run nothing: print the table of runs saved with --json")
    cfg = p.parse_args(argv)
    if cfg.table:
        results = []
        for path in cfg.table:
            with open(path) as f:
                results.extend(json.load(f))
        print(table(results))
        if mode_table(results):
            print()
            print(mode_table(results))
        return 0
    cfg.variants = [v for v in cfg.variants.split(",") if v]
    cfg.modes = [m for m in cfg.modes.split(",") if m]
    if not cfg.modes or any(m not in ("disk", "memory") for m in cfg.modes):
        p.error("--modes: a comma list of disk and memory")
    if cfg.world < 2 or cfg.hostloss_world % 2:
        p.error("--world must be >= 2 and --hostloss-world even")

    def on_signal(signum, _frame):
        _run_cleanups()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    errors = []
    try:
        results = run_all(cfg, errors)
    finally:
        _run_cleanups()
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump(results, f, indent=1)
    print()
    print(table(results))
    modes = mode_table(results)
    if modes:
        print()
        print(modes)
    for e in errors:
        print(f"FAILED: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
