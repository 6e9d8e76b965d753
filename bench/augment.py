#!/usr/bin/python3
"""Augmentation cost per core: batchd against torchvision's DataLoader on
the same generated dataset, with the same recipe, pinned to one core
(taskset), as bench/side_by_side.py measures the plain crop.

Recipes (per-sample, uint8 output, batch 64):
  baseline   RandomResizedCrop 224 + horizontal flip
  ta_wide    RandomResizedCrop 176 + flip + TrivialAugmentWide (bilinear,
             as torchvision's ResNet-50 recipe runs it)
  ra         RandomResizedCrop 224 + flip + RandAugment(2, 9)
  simclr     one SimCLR view: RandomResizedCrop 224 + flip +
             ColorJitter(0.4, 0.4, 0.4, 0.1) p 0.8 + RandomGrayscale 0.2 +
             GaussianBlur(23, sigma (0.1, 2.0)) p 0.5
Configurations, each recipe: batchd --workers 1 (daemon + batchd-client
--augment, both on core 0; the plan's entries come from batchd.augment),
and the DataLoader with num_workers 0 and 1 (torch.set_num_threads(1)).
Each runs a warm-up epoch and --epochs measured epochs; a repeat's figure
is the median over its epochs, the report the median over repeats, with
the ratios batchd / DataLoader and each recipe / its loader's baseline.

  /usr/bin/python3 bench/augment.py --build build            # full run
  /usr/bin/python3 bench/augment.py --build build --smoke    # seconds

The DataLoader side runs in a child process of this script
(--dataloader RECIPE), so one table defines both sides of each recipe.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import side_by_side  # noqa: E402
from side_by_side import PYTHON, ensure_dataset, run, taskset  # noqa: E402

BATCH = 64


def batchd_ops(name):
    """The recipe's Pipeline.augment entries, from batchd.augment (the
    package's pure-Python part; no extension needed)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "batchd_augment", os.path.join(ROOT, "python", "batchd", "augment.py"))
    A = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(A)
    return {
        "baseline": [],
        "ta_wide": [A.TrivialAugmentWide(interpolation="bilinear")],
        "ra": [A.RandAugment(num_ops=2, magnitude=9)],
        "simclr": [A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
                   A.RandomGrayscale(p=0.2),
                   A.GaussianBlur(23, sigma=(0.1, 2.0), p=0.5)],
    }[name], A.to_text


def torchvision_ops(name):
    """The same recipe's torchvision transforms, after crop and flip."""
    from torchvision import transforms as T
    return {
        "baseline": [],
        "ta_wide": [T.TrivialAugmentWide(
            interpolation=T.InterpolationMode.BILINEAR)],
        "ra": [T.RandAugment(num_ops=2, magnitude=9)],
        "simclr": [T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                   T.RandomGrayscale(p=0.2),
                   T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))],
                                 p=0.5)],
    }[name]


# name -> crop size at full scale
RECIPES = {"baseline": 224, "ta_wide": 176, "ra": 224, "simclr": 224}


def crop_size(name, smoke):
    # The smoke run shrinks every crop (the harness, not the figures).
    return RECIPES[name] // 4 if smoke else RECIPES[name]


def cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def dataloader_main(args):
    """Child mode: one recipe through the DataLoader, a JSON line per
    epoch (the first a warm-up)."""
    import torch
    import torchvision
    from torchvision import transforms as T
    torch.set_num_threads(1)
    transform = T.Compose([T.RandomResizedCrop(args.size),
                           T.RandomHorizontalFlip(),
                           *torchvision_ops(args.dataloader),
                           T.PILToTensor()])
    loader = torch.utils.data.DataLoader(
        torchvision.datasets.ImageFolder(args.data, transform),
        batch_size=BATCH, shuffle=True, num_workers=args.workers)
    torch.manual_seed(0)
    for epoch in range(args.epochs + 1):
        cpu_start, start, images = cpu_seconds(), time.perf_counter(), 0
        for pixels, _labels in loader:
            images += pixels.shape[0]
        seconds = time.perf_counter() - start
        print(json.dumps({"epoch": epoch, "images": images,
                          "images_per_s": images / seconds,
                          "cpu_seconds": cpu_seconds() - cpu_start}),
              flush=True)
    return 0


def dataloader(data, recipe, size, workers, epochs):
    out, _ = run(taskset("0") + [
        PYTHON, os.path.abspath(__file__), "--dataloader", recipe,
        "--data", data, "--size", str(size), "--workers", str(workers),
        "--epochs", str(epochs)])
    rows = [json.loads(line) for line in out.splitlines()
            if line.startswith("{")][1:]
    if len(rows) != epochs:
        raise RuntimeError(f"unexpected DataLoader output:\n{out}")
    return {"images_per_s": statistics.median(r["images_per_s"] for r in rows),
            "cpu_per_image": sum(r["cpu_seconds"] for r in rows) /
                             sum(r["images"] for r in rows)}


def batchd(build, data, recipe, size, epochs):
    ops, to_text = batchd_ops(recipe)
    flags = ["--size", str(size)]
    if ops:
        flags += ["--augment", to_text(ops)]
    return side_by_side.batchd(build, data, 1, "0", epochs,
                               client_flags=flags)


LOADERS = ("batchd w=1", "DataLoader nw=0", "DataLoader nw=1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="CMake build dir")
    parser.add_argument("--data", default=None,
                        help="dataset dir (default data/bench, generated once)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2,
                        help="measured epochs per configuration and repeat")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help="comma-separated subset of " + ", ".join(RECIPES))
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny dataset and crops, one repeat, one epoch: "
                             "checks the harness runs")
    # Child mode (the DataLoader side of one recipe).
    parser.add_argument("--dataloader", choices=list(RECIPES),
                        help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dataloader:
        return dataloader_main(args)

    build = os.path.abspath(args.build)
    if args.smoke:
        args.images, args.repeats, args.epochs = 24, 1, 1
        data = args.data or os.path.join(build, "bench", "augment_smoke_data")
    else:
        data = args.data or os.path.join(ROOT, "data", "bench")
    data = os.path.abspath(data)
    ensure_dataset(build, data, args.images)
    recipes = args.recipes.split(",")
    for recipe in recipes:
        if recipe not in RECIPES:
            parser.error(f"unknown recipe {recipe!r}")
    torch_ok = side_by_side.have_torch()
    if not torch_ok:
        print("note: /usr/bin/python3 lacks torch/torchvision; DataLoader "
              "skipped", file=sys.stderr)
    print(f"dataset {data}: {args.repeats} repeats x {args.epochs} epochs "
          f"(+1 warm-up); batch {BATCH}, uint8, 1 core", flush=True)

    results = {(r, loader): [] for r in recipes for loader in LOADERS}
    for repeat in range(args.repeats):
        for recipe in recipes:
            size = crop_size(recipe, args.smoke)
            thunks = {"batchd w=1": lambda: batchd(build, data, recipe, size,
                                                   args.epochs)}
            if torch_ok:
                for workers in (0, 1):
                    thunks[f"DataLoader nw={workers}"] = (
                        lambda w=workers: dataloader(data, recipe, size, w,
                                                     args.epochs))
            for loader, thunk in thunks.items():
                r = thunk()
                results[(recipe, loader)].append(r)
                # Whether the daemon ran the ops: its augment stage.
                stage = ""
                if "daemon_augment_ms" in r:
                    stage = (", daemon augment stage " +
                             (f"{r['daemon_augment_ms']:.3f} ms/image"
                              if r["daemon_augment_ms"] is not None
                              else "not reported"))
                print(f"repeat {repeat}: {recipe} ({size}px), {loader}: "
                      f"{r['images_per_s']:.1f} images/s, "
                      f"{1e3 * r['cpu_per_image']:.3f} ms CPU/image{stage}",
                      flush=True)

    def median(recipe, loader):
        runs = results[(recipe, loader)]
        if not runs:
            return None
        return statistics.median(r["images_per_s"] for r in runs)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    summary = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
               "repeats": args.repeats, "epochs": args.epochs, "recipes": {}}
    print()
    print("| recipe | crop | batchd w=1 images/s | DataLoader nw=0 | "
          "DataLoader nw=1 | batchd / nw=0 | batchd / nw=1 | batchd vs its "
          "baseline | nw=0 vs its baseline |")
    print("|---|---|---|---|---|---|---|---|---|")
    for recipe in recipes:
        rates = {loader: median(recipe, loader) for loader in LOADERS}
        base = {loader: median("baseline", loader) if "baseline" in recipes
                else None for loader in LOADERS}
        summary["recipes"][recipe] = {"crop": crop_size(recipe, args.smoke),
                                      "images_per_s": rates}
        cells = [f"{rates[loader]:.1f}" if rates[loader] else "-"
                 for loader in LOADERS]
        print(f"| {recipe} | {crop_size(recipe, args.smoke)} | "
              f"{' | '.join(cells)} | "
              f"{ratio(rates['batchd w=1'], rates['DataLoader nw=0'])} | "
              f"{ratio(rates['batchd w=1'], rates['DataLoader nw=1'])} | "
              f"{ratio(rates['batchd w=1'], base['batchd w=1'])} | "
              f"{ratio(rates['DataLoader nw=0'], base['DataLoader nw=0'])} |")
    for recipe, entry in summary["recipes"].items():
        for loader, rate in entry["images_per_s"].items():
            if rate is not None and not rate > 0:
                print(f"error: {recipe} {loader}: images/s is not positive",
                      file=sys.stderr)
                return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
