#!/usr/bin/python3
"""Time from process start to the first batch after an elastic resume, in
the middle of an epoch of a 1.28M-sample dataset, side by side with a plain
start at the epoch's beginning.

The dataset is a list file of --samples entries cycling over a few hundred
real JPEGs (tools/make_dataset): the index is ImageNet's size, the decoding
is not the point. A trainer process of rank 0 in a world of --world-after
starts (python, torch, batchd), loads a state taken by a world of
--world-before in the middle of epoch 1 (a position that is no batch
boundary of the new world, so the stream is reopened with Plan.resume),
and takes its first batch. The baseline process does the same without the
state. Both run --repeats times, interleaved; the report gives medians and
the resume's cost over the baseline. The daemon is started once and warmed
up (index loaded) before any timing: what is measured is the trainer's
side and the daemon's work for a resumed plan (the resumed epoch's order,
the first batch), not the index load.

  /usr/bin/python3 bench/elastic_resume.py --build build
  /usr/bin/python3 bench/elastic_resume.py --build build --smoke
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "testing", "python"))
from batchd_testing.daemon import Daemon, daemon_binary  # noqa: E402
from batchd_testing.datasets import image_files  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch

# Prints the seconds from its own start (passed in) to its first batch.
TRAINER = textwrap.dedent("""
    import json, sys, time
    started = float(sys.argv[1])
    import batchd
    endpoint, world, state = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    loader = batchd.Loader(endpoint, "big", 32, size=64, seed=1, rank=0,
                           world_size=world, prefetch=2)
    epoch = 1
    if state:
        line = loader.load_state_dict(json.loads(state))
    loader.set_epoch(epoch)
    images, labels = next(iter(loader))
    print(json.dumps({"first_batch_s": time.time() - started,
                      "len": len(loader)}))
""")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--samples", type=int, default=1_281_167)
    p.add_argument("--images", type=int, default=300,
                   help="real JPEGs the list file cycles over")
    p.add_argument("--world-before", type=int, default=8)
    p.add_argument("--world-after", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true",
                   help="a small index and one repeat (seconds)")
    return p.parse_args()


def trainer_env(build):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python"), os.path.join(build, "python")])
    return env


def first_batch(args, endpoint, world, state):
    out = subprocess.run(
        [PYTHON, "-c", TRAINER, repr(time.time()), endpoint, str(world),
         json.dumps(state) if state else ""],
        env=trainer_env(args.build), check=True, capture_output=True,
        text=True).stdout
    return json.loads(out)


def main():
    args = parse_args()
    if args.smoke:
        args.samples, args.images, args.repeats = 20_000, 40, 1
    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory() as tmp:
        images = os.path.join(tmp, "images")
        subprocess.run([os.path.join(build, "tools", "make_dataset"), "--out",
                        images, "--images", str(args.images), "--classes",
                        "10", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
        files = [(os.path.relpath(path, tmp), label)
                 for path, label in image_files(images)]
        list_file = os.path.join(tmp, "big.txt")
        with open(list_file, "w") as f:
            for i in range(args.samples):
                path, label = files[i % len(files)]
                f.write(f"{path} {label}\n")
        daemon = Daemon(daemon_binary(build), {"big": list_file},
                        ["--workers", "2"], directory=os.path.join(tmp, "d"))
        try:
            batch = 32
            before = args.world_before
            # The middle of epoch 1 for the old world, in lockstep.
            next_batch = args.samples // (2 * batch * before)
            if next_batch * before % args.world_after == 0:
                next_batch += 1  # not a batch boundary of the new world
            position = next_batch * batch * before
            state = {"version": 2, "epoch": 1, "next_batch": next_batch,
                     "epoch_start": 0, "position": position,
                     "samples": args.samples, "dataset": "big",
                     "batch_size": batch, "seed": 1, "shuffle": True,
                     "drop_last": False, "rank": 0, "world_size": before}
            # Warm-up: the index is loaded and the code paths are hot.
            first_batch(args, daemon.endpoint, args.world_after, None)
            plain, resumed = [], []
            for _ in range(args.repeats):
                plain.append(first_batch(args, daemon.endpoint,
                                         args.world_after, None))
                resumed.append(first_batch(args, daemon.endpoint,
                                           args.world_after, state))
        finally:
            daemon.stop()
    p = statistics.median(r["first_batch_s"] for r in plain)
    r = statistics.median(r["first_batch_s"] for r in resumed)
    print(f"dataset: {args.samples:,} samples (list file over {args.images} "
          f"JPEGs); resume at sample {position:,} of epoch 1, world "
          f"{args.world_before} -> {args.world_after}; {args.repeats} "
          f"repeats, interleaved")
    print(f"process start -> first batch, plain start:     {p:.3f} s (median;"
          f" {min(x['first_batch_s'] for x in plain):.3f}-"
          f"{max(x['first_batch_s'] for x in plain):.3f})")
    print(f"process start -> first batch, elastic resume:  {r:.3f} s (median;"
          f" {min(x['first_batch_s'] for x in resumed):.3f}-"
          f"{max(x['first_batch_s'] for x in resumed):.3f})")
    print(f"resume costs {r - p:+.3f} s over a plain start ({r / p:.2f}x); "
          f"resumed epoch: {resumed[0]['len']} batches for rank 0, a whole "
          f"one {plain[0]['len']}; target <= 2 s: "
          f"{'met' if r <= 2.0 else 'missed'}")


if __name__ == "__main__":
    main()
