"""Submit the example training job from Python, follow its worker 0 log and wait for it:

    ./build/release/bin/tessera up --generation v6e --topology 4x4 --slices 2
    PYTHONPATH=python python3 examples/client/submit.py
    ./build/release/bin/tessera down --purge

Uses tessera.client (standard library only). The accelerator is written the way Ray writes it,
as a pod type: TPU-V6E-16 is a v6e slice of 16 chips, which is 2x8 or 4x4, so the topology is
given too; the head stores and prints v6e 4x4.
"""
import argparse
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
from tessera.client import ApiError, Client  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", default=".tessera")
    p.add_argument("--name", default="client-demo")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    c = Client.from_state_dir(args.state_dir)
    job = {
        "apiVersion": "tessera/v1", "kind": "TrainJob", "metadata": {"name": args.name},
        "spec": {"accelerator": "TPU-V6E-16", "topology": "4x4", "slices": 2,
                 "template": {"command": ["/usr/bin/python3", "examples/train/train.py"],
                              "env": {"STEPS": "20"}, "workingDir": REPO}},
    }
    try:
        c.apply(job)
    except ApiError as e:  # e.g. 422 spec.topology, 409 metadata.name
        sys.exit("refused: %s (field %s)" % (e.message, e.field))
    got = c.get("job", args.name)
    print("submitted %s: %s %s" % (args.name, got["spec"]["accelerator"], got["spec"]["topology"]))
    try:
        c.wait("job", args.name, "phase=Running", timeout=args.timeout)
    except RuntimeError as e:  # it finished before it was seen running
        print(e)
    for line in c.logs("job", args.name, worker=0, follow=True):
        print("worker 0 |", line)
    done = c.wait("job", args.name, "phase=Succeeded", timeout=args.timeout)
    print("%s %s" % (args.name, done["status"]["phase"]))
    c.delete("job", args.name)


if __name__ == "__main__":
    main()
