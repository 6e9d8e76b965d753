#!/usr/bin/env python3
"""--workers auto against static worker counts, side by side in one run.

The project's founding story, reproduced with batchd-client --step_ms: a
trainer whose step takes STEP ms, fed by one daemon with --workers 1, with
--workers 2, and with --workers auto (--min-workers 1, --max-workers 2).
For each step time and setting it prints the steady epoch time (mean over
the epochs that start after the first 10 s, so that auto's convergence is
reported separately) and the trainer's wait share over those epochs
("wait %", each epoch's first batch included: the client asks for an
epoch's batches when it starts it); the stall over the whole run without
each epoch's first batch ("stall %", as the client's own line reports it,
auto's convergence included); the workers the daemon ran (time-averaged
from /metrics over the whole run); and for auto how long it took to reach
the worker count it ended on.

    bench/autoscale.py [--build build] [--seconds 30] [--steps 20,60,150,400]

The dataset is data/bench (1,000 photograph-like JPEGs from make_dataset;
generated if missing). Every setting runs once per step time, in turn, on
the same machine; BENCHMARKS.md records the table with the date.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "testing", "python"))
from batchd_testing.daemon import Daemon, daemon_binary  # noqa: E402
from batchd_testing.datasets import count_images  # noqa: E402

BATCH = 64
EPOCH_LINE = re.compile(
    r"^epoch (\d+): (\d+) batches, (\d+) images in ([0-9.]+) s: .* waited "
    r"([0-9.]+)% of wall time")
CLIENT_LINE = re.compile(
    r"^client: waited ([0-9.]+)% \(([0-9.]+)% after each epoch's first batch\)")
SETTLE_S = 10.0


def workers_now(page):
    """batchd_workers from a /metrics page."""
    for line in page.splitlines():
        if line.startswith("batchd_workers "):
            return float(line.split()[1])
    raise RuntimeError("no batchd_workers on /metrics")


def run(build, data, workers, step_ms, seconds):
    """One trainer run; returns a dict of figures."""
    flags = ["--workers", "auto", "--min-workers", "1", "--max-workers", "2"] \
        if workers == "auto" else ["--workers", str(workers)]
    images = count_images(data)
    if images == 0:
        raise RuntimeError(f"{data} holds no images the daemon would serve")
    with Daemon(daemon_binary(build), {"bench": data}, flags,
                metrics=True) as daemon:
        batches = math.ceil(images / BATCH)
        # Enough epochs for `seconds` at the step time (or at ~35 ms a
        # batch, two workers' pace, for short steps).
        epoch_s = batches * max(step_ms, 35) / 1000
        epochs = max(3, math.ceil(seconds / epoch_s))
        samples = []
        done = threading.Event()

        def sample():
            start = time.time()
            while not done.is_set():
                try:
                    samples.append((time.time() - start,
                                    workers_now(daemon.metrics())))
                except OSError:
                    pass
                done.wait(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        client = subprocess.run(
            [f"{build}/client/batchd-client", "--endpoint", daemon.endpoint,
             "--dataset", "bench", "--batch_size", str(BATCH), "--size", "224",
             "--prefetch", "4", "--epochs", str(epochs), "--step_ms",
             str(step_ms)],
            capture_output=True, text=True, check=True)
        done.set()
        sampler.join()
        log = daemon.log()
    epochs_seen = []
    for line in client.stdout.splitlines():
        m = EPOCH_LINE.match(line)
        if m:
            epochs_seen.append((float(m.group(4)), float(m.group(5))))
    elapsed, steady = 0.0, []
    for duration, waited in epochs_seen:
        if elapsed >= SETTLE_S:
            steady.append((duration, waited))
        elapsed += duration
    if not steady:
        steady = epochs_seen[-1:]
    mean_workers = 0.0
    if len(samples) > 1:
        area = sum((samples[i + 1][0] - samples[i][0]) * samples[i][1]
                   for i in range(len(samples) - 1))
        mean_workers = area / (samples[-1][0] - samples[0][0])
    final = samples[-1][1] if samples else float("nan")
    converged = 0.0
    for t, w in samples:
        if w != final:
            converged = t
    run_wait = next((float(m.group(2)) for m in map(CLIENT_LINE.match,
                                                    client.stdout.splitlines())
                     if m), float("nan"))
    return dict(
        run_wait=run_wait,
        epoch_s=sum(d for d, _ in steady) / len(steady),
        wait=sum(w for _, w in steady) / len(steady),
        total_s=elapsed, workers=mean_workers, final=final,
        converged_s=converged,
        changes=len(re.findall(r"batchd: autoscale: ", log)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--data", default="data/bench")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--steps", default="20,60,150,400")
    parser.add_argument("--images", type=int, default=1000,
                        help="images of a generated dataset")
    args = parser.parse_args()
    if not os.path.exists(f"{args.data}/.complete"):
        subprocess.run([f"{args.build}/tools/make_dataset", "--out", args.data,
                        "--images", str(args.images), "--classes", "10",
                        "--seed", "1"],
                       check=True)
        open(f"{args.data}/.complete", "w").close()
    print(f"batch {BATCH}, 224x224 train crops, prefetch 4, one daemon; "
          f"steady = epochs starting after {SETTLE_S:.0f} s; "
          f"{os.cpu_count()} CPUs")
    print(f"{'step':>6} {'setting':>9} {'epoch s':>8} {'wait %':>7} "
          f"{'stall %':>8} {'workers':>8} {'vs best':>8}  "
          f"auto: final, converged, changes")
    for step in (int(s) for s in args.steps.split(",")):
        results = {w: run(args.build, args.data, w, step, args.seconds)
                   for w in (1, 2, "auto")}
        best = min(results[1]["epoch_s"], results[2]["epoch_s"])
        for w, r in results.items():
            extra = ""
            if w == "auto":
                extra = (f"  {r['final']:.0f} workers, {r['converged_s']:.1f} s, "
                         f"{r['changes']}")
            print(f"{step:>4}ms {str(w):>9} {r['epoch_s']:8.3f} "
                  f"{r['wait']:7.1f} {r['run_wait']:8.1f} {r['workers']:8.2f} "
                  f"{r['epoch_s'] / best:7.3f}x{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
