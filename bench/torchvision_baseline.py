#!/usr/bin/python3
"""The baseline batchd is measured against: torchvision's DataLoader.

ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip, then either
PILToTensor (uint8, the same output as batchd) or ToTensor + Normalize (float,
as most training scripts run it), DataLoader(batch_size=64, shuffle=True,
num_workers=N). One JSON object per epoch on stdout:

  {"epoch": 1, "images": 1024, "seconds": 2.71, "images_per_s": 377.9,
   "cpu_seconds": 2.69}

cpu_seconds counts the main process and its DataLoader workers (they are
joined at the end of each epoch, so RUSAGE_CHILDREN has them by then).
Run it with Debian's /usr/bin/python3 (python3-torch, python3-torchvision):

  /usr/bin/python3 bench/torchvision_baseline.py --data data/bench --workers 0
"""
import argparse
import json
import resource
import sys
import time

import torch
import torchvision
from torchvision import transforms


def cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ImageFolder root")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--variant", choices=["uint8", "normalize"], default="uint8")
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs, the first of them a warm-up")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()

    # One intra-op thread: the process is pinned to as many cores as the
    # daemon it is compared with, and the workers are the parallelism.
    torch.set_num_threads(1)
    steps = [transforms.RandomResizedCrop(args.size),
             transforms.RandomHorizontalFlip()]
    if args.variant == "uint8":
        steps.append(transforms.PILToTensor())
    else:
        steps += [transforms.ToTensor(),
                  transforms.Normalize(mean=[0.485, 0.456, 0.406],
                                       std=[0.229, 0.224, 0.225])]
    dataset = torchvision.datasets.ImageFolder(args.data, transforms.Compose(steps))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                         shuffle=True, num_workers=args.workers)
    torch.manual_seed(0)
    for epoch in range(args.epochs):
        cpu_start = cpu_seconds()
        start = time.perf_counter()
        images = 0
        for pixels, _labels in loader:
            images += pixels.shape[0]
        seconds = time.perf_counter() - start
        print(json.dumps({"epoch": epoch, "images": images,
                          "seconds": round(seconds, 4),
                          "images_per_s": round(images / seconds, 2),
                          "cpu_seconds": round(cpu_seconds() - cpu_start, 4)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
