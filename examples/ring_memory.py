#!/usr/bin/env python3
"""Measures the host memory a batchd.Loader holds: its ring of `prefetch`
slots, each as large as the largest batch.

For each --prefetch value a fresh process imports torch, opens a loader,
streams --batches batches (dropping each tensor), and reports how much its
resident set grew, next to the ring's size (window x slot bytes).

    /usr/bin/python3 examples/ring_memory.py --data data/demo \\
        --build build --batch-size 64 --image-size 224 --prefetch 2,4,8
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(endpoint, args):
    import torch  # noqa: F401  - counted in the baseline, not in the loader
    import batchd
    before = rss_bytes()
    loader = batchd.Loader(endpoint, "train", args.batch_size,
                           size=args.image_size, prefetch=args.prefetch,
                           rank=0, world_size=1)
    streamed = 0
    while streamed < args.batches:
        for images, _ in loader:
            streamed += 1
            del images
            if streamed == args.batches:
                break
    grown = rss_bytes() - before
    print(json.dumps({"prefetch": args.prefetch, "window": loader.window,
                      "slot_bytes": loader.slot_bytes,
                      "ring_bytes": loader.ring_bytes, "rss_grown": grown}))
    loader.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--build", default="build")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--prefetch", default="2,4,8")
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--child-endpoint")
    p.add_argument("--daemon-workers", type=int, default=os.cpu_count())
    args = p.parse_args()
    if args.child_endpoint:
        args.prefetch = int(args.prefetch)
        child(args.child_endpoint, args)
        return
    from train_resnet import ensure_dataset, start_daemon
    args.images = 512
    daemon = start_daemon(args, ensure_dataset(args))
    try:
        print(f"batch {args.batch_size} x 3 x {args.image_size} x "
              f"{args.image_size} uint8; RSS growth after {args.batches} "
              f"batches, in a fresh process per prefetch")
        for prefetch in args.prefetch.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--child-endpoint",
                 daemon.endpoint, "--prefetch", prefetch, "--batch-size",
                 str(args.batch_size), "--image-size", str(args.image_size),
                 "--batches", str(args.batches), "--data", args.data],
                check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"prefetch {r['prefetch']}: ring {r['window']} x "
                  f"{r['slot_bytes'] / 1e6:.2f} MB = "
                  f"{r['ring_bytes'] / 1e6:.1f} MB; resident set grew "
                  f"{r['rss_grown'] / 1e6:.1f} MB", flush=True)
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
