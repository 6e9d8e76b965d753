#!/usr/bin/python3
"""Datasets side by side: the same images served from an ImageFolder, from
tar shards written by batchd-prep (a byte-for-byte copy), and from shards
prepared at --max-side 512, 320 and 256.

For each: batchd images/s on one core (daemon with 1 worker and
batchd-client, both pinned with taskset -c 0, RandomResizedCrop 224 + flip,
uint8, batch 64) and ms of CPU per image (daemon + client), interleaved in
each repeat so that the configurations share the machine's noise. Then what
capping costs in the output: the mean absolute difference of the output
bytes (uint8, 0-255) against the original-resolution batches, for the eval
transform (Resize 256 + CenterCrop 224, geometry identical) and the train
transform (the same random crops, computed on the smaller image).

  /usr/bin/python3 bench/datasets_bench.py --build build --images 1000
  /usr/bin/python3 bench/datasets_bench.py --build build --smoke
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "testing", "python")]
import side_by_side  # noqa: E402  (its daemon + client runner)
from batchd_testing.daemon import Daemon, daemon_binary  # noqa: E402
from batchd_testing.datasets import count_images  # noqa: E402

MAX_SIDES = (512, 320, 256)


def prepare(build, source, out, max_side):
    """batchd-prep into `out` unless a finished copy is there; returns the
    manifest line and seconds (0 when reused)."""
    stamp = os.path.join(out, ".complete")
    if os.path.exists(stamp):
        return 0.0
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "tools", "batchd-prep"), "--input", source,
           "--out", out, "--shard-size", "100", "--quiet"]
    if max_side:
        cmd += ["--max-side", str(max_side)]
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    open(stamp, "w").close()
    return seconds


def tar_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, f))
               for f in os.listdir(directory) if f.endswith(".tar"))


def mean_differences(build, datasets, batches):
    """Mean |output - ImageFolder output| of the bytes, per dataset and
    transform, over the first `batches` batches of epoch 0 (one daemon
    serving every dataset, through the Python loader)."""
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(build, "python")]
    import numpy as np
    import batchd

    def served(name):  # dataset names may not contain spaces
        return name.replace(" ", "-")

    served_datasets = {served(name): path for name, path in datasets.items()}
    with Daemon(daemon_binary(build), served_datasets,
                ["--workers", "2"]) as daemon:
        endpoint = daemon.endpoint
        result = {}
        for mode in ("eval", "train"):
            outputs = {}
            for name in datasets:
                with batchd.Loader(endpoint, served(name), 64, mode=mode, size=224,
                                   seed=1, layout="nhwc", rank=0,
                                   world_size=1) as loader:
                    got = []
                    for images, _ in loader:
                        got.append(images.numpy().astype(np.int16))
                        if len(got) == batches:
                            break
                    outputs[name] = np.concatenate(got)
            for name in datasets:
                result[(name, mode)] = float(
                    np.abs(outputs[name] - outputs["folder"]).mean())
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--data", default=None,
                        help="dataset directory (default data/datasets-N)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8,
                        help="batches compared for the pixel differences")
    parser.add_argument("--smoke", action="store_true",
                        help="64 images, 1 repeat, 1 epoch: seconds")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.repeats, args.epochs, args.batches = 64, 1, 1, 1
    build = os.path.abspath(args.build)
    data = os.path.abspath(args.data or
                           os.path.join(ROOT, "data", f"datasets-{args.images}"))
    folder = os.path.join(data, "folder")
    side_by_side.ensure_dataset(build, folder, args.images)
    datasets = {"folder": folder, "shards": os.path.join(data, "shards")}
    prep_seconds = {"shards": prepare(build, folder, datasets["shards"], 0)}
    for side in MAX_SIDES:
        name = f"max-side {side}"
        datasets[name] = os.path.join(data, f"max{side}")
        prep_seconds[name] = prepare(build, folder, datasets[name], side)
    print(f"{count_images(folder)} images; shard bytes: " +
          ", ".join(f"{n} {tar_bytes(p) / 1e6:.1f} MB"
                    for n, p in datasets.items() if n != "folder"))
    print("batchd-prep seconds (2 threads, 0 = reused): " +
          ", ".join(f"{n} {s:.1f}" for n, s in prep_seconds.items()))

    names = list(datasets)
    runs = {n: [] for n in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            runs[name].append(side_by_side.batchd(build, datasets[name], 1, "0",
                                                  args.epochs))
    mad = mean_differences(build, datasets, args.batches)

    def med(values):
        return statistics.median(values), min(values), max(values)

    print("| dataset | images/s on 1 core, median (min-max) | ms CPU/image, "
          "median (min-max) | mean abs diff, eval | mean abs diff, train |")
    print("|---|---|---|---|---|")
    for name in names:
        rate = med([r["images_per_s"] for r in runs[name]])
        cpu = med([r["cpu_per_image"] * 1e3 for r in runs[name]])
        print(f"| {name} | {rate[0]:.0f} ({rate[1]:.0f}-{rate[2]:.0f}) | "
              f"{cpu[0]:.3f} ({cpu[1]:.3f}-{cpu[2]:.3f}) | "
              f"{mad[(name, 'eval')]:.2f} | {mad[(name, 'train')]:.2f} |")

    def ratio(a, b, key, invert=False):
        values = [(y[key] / x[key]) if invert else (x[key] / y[key])
                  for x, y in zip(runs[a], runs[b])]
        return med(values)

    print("Ratios within each repeat, median (min-max): images/s | "
          "images per CPU-second")
    for a, b in [("shards", "folder")] + [(f"max-side {s}", "shards")
                                          for s in MAX_SIDES]:
        r = ratio(a, b, "images_per_s")
        c = ratio(a, b, "cpu_per_image", invert=True)
        print(f"  {a} / {'ImageFolder' if b == 'folder' else 'original'}: "
              f"{r[0]:.2f}x ({r[1]:.2f}-{r[2]:.2f}) | "
              f"{c[0]:.2f}x ({c[1]:.2f}-{c[2]:.2f})")


if __name__ == "__main__":
    main()
