"""Reserve two v6e 4x4 slices from Python, as Ray's slice_placement_group, run two training jobs
inside the reservation at once (one slice each), and give the slices back:

    ./build/release/bin/tessera up --generation v6e --topology 4x4 --slices 2
    PYTHONPATH=python python3 examples/reservation/reserve.py
    ./build/release/bin/tessera down --purge

Uses tessera.client (standard library only). reserve_slices() applies a SliceReservation;
ready() blocks until the head holds every slice, or raises TimeoutError with the head's reason
(e.g. not enough free slices, and which workloads would have to end). The jobs name it in
spec.reservation, so they run only on its hosts and leave it held when they end.
"""
import argparse
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import ApiError, Client  # noqa: E402


def job(name, reservation):
    return {
        "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": name},
        "spec": {"accelerator": "v6e", "topology": "4x4", "slices": 1,
                 "reservation": reservation,
                 "template": {"command": ["/usr/bin/python3", "examples/train/train.py"],
                              "env": {"STEPS": "20"}, "workingDir": REPO}},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", default=".tessera")
    p.add_argument("--name", default="demo-slices")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    c = Client.from_state_dir(args.state_dir)
    try:
        rsv = c.reserve_slices("v6e", "4x4", num_slices=2, name=args.name, ttl="2h")
    except ApiError as e:  # e.g. 422 spec.topology, or more slices than the cluster has
        sys.exit("refused: %s (field %s)" % (e.message, e.field))
    try:
        rsv.ready(timeout=args.timeout)
    except TimeoutError as e:
        rsv.delete()
        sys.exit(str(e))
    for s in rsv.slices:
        print("reserved %s on %s" % (s["name"], ", ".join(s["hosts"])))
    names = ["%s-train-%d" % (args.name, i) for i in range(2)]
    for n in names:
        c.apply(job(n, rsv.name))
    for n in names:
        done = c.wait("job", n, "phase=Succeeded", timeout=args.timeout)
        hosts = sorted({w.get("host") for w in done["status"].get("workers", [])})
        print("%s %s on %s" % (n, done["status"]["phase"], ", ".join(h for h in hosts if h)))
    print("still held: %s %s" % (rsv.name, rsv.refresh().get("phase")))
    for n in names:
        c.delete("job", n)
    c.wait("job", names[-1], "delete", timeout=args.timeout)
    rsv.delete()  # 409 naming the jobs if any still ran inside it; force=True would stop them
    print("released %s" % rsv.name)


if __name__ == "__main__":
    main()
