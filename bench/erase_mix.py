#!/usr/bin/python3
"""The client's CPU cost of RandomErasing and MixUp/CutMix per batch:
batchd's CPU path (client/cuda/erase_mix.h, through batchd._native)
against torchvision doing the same on the same tensors, in one run, one
thread each (torch.set_num_threads(1); batchd's CPU path is one thread).

Input: a uint8 NHWC batch (default 64 x 224 x 224 x 3); output float32
NCHW normalised with ImageNet's mean/std, as a training step takes it.
torchvision's side is the reference recipe's: ToTensor + Normalize
(x.permute.float() / 255, F.normalize), RandomErasing via F.erase with the
same rectangles, then RandomMixup / RandomCutmix as the classification
references define them (roll, mul_, add_ / box paste) and one-hot labels
mixed the same way. Rectangles: torchvision's RandomErasing(p=0.25)
get_params drawn once with torch's generator (seed 0) and used by both
sides; lambda 0.3 and a CutMix box of the same area fraction.

Rows (milliseconds per batch, median of --repeats; the batchd/torchvision
ratio): normalise only; + erasing value 0; + erasing 'random';
+ MixUp; + CutMix; erasing 0 + MixUp (the ResNet-50 recipe's worst
batch).

  /usr/bin/python3 bench/erase_mix.py --build build
  /usr/bin/python3 bench/erase_mix.py --build build --smoke   # seconds
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def timed(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--smoke", action="store_true",
                        help="batch 4 of 32x32, 2 repeats")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.size, args.repeats = 4, 32, 2
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    from torchvision.transforms import functional as F
    from batchd import _native

    torch.set_num_threads(1)
    n, s = args.batch, args.size
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (n, s, s, 3), dtype=torch.uint8,
                           generator=g)
    labels = torch.randint(0, 1000, (n,), generator=g)
    # The rectangles: torchvision's get_params for the samples that
    # RandomErasing(p=0.25) erases.
    import torchvision
    torch.manual_seed(0)
    rects = []
    probe = torch.empty(3, s, s)
    for i in range(n):
        if torch.rand(1).item() < 0.25:
            top, left, h, w, _ = torchvision.transforms.RandomErasing.get_params(
                probe, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0])
            if h < s and w < s:
                rects.append((i, top, left, h, w))
    lam = 0.3
    side = int(round(s * (1 - lam) ** 0.5))
    box = ((s - side) // 2, (s - side) // 2, side, side)
    out = torch.empty((n, 3, s, s), dtype=torch.float32)
    out_bytes = out.view(torch.uint8).numpy()
    src = pixels.numpy()

    def batchd(rect_list, noise, kind):
        def run():
            _native.normalize_erase_mix(
                src, out_bytes, [n, s, s, 3], "nhwc", "nchw", "float32",
                list(MEAN), list(STD),
                [(*r, noise, 1234 + r[0]) for r in rect_list], kind, lam, box)
            if kind != "none":
                _native.soft_labels(labels.tolist(), 1000, 0.1, kind, lam)
        return run

    def torchvision_side(rect_list, noise, kind):
        def run():
            x = F.normalize(pixels.permute(0, 3, 1, 2).float().div_(255),
                            MEAN, STD)
            for i, top, left, h, w in rect_list:
                v = (torch.empty((3, h, w), dtype=torch.float32).normal_()
                     if noise else torch.tensor(0.0))
                x[i] = F.erase(x[i], top, left, h, w, v, inplace=True)
            if kind == "none":
                return x
            target = torch.nn.functional.one_hot(labels, 1000).float()
            target = target * 0.9 + 0.1 / 1000
            rolled_t = target.roll(1, 0)
            if kind == "mixup":
                rolled = x.roll(1, 0)
                rolled.mul_(1.0 - lam)
                x.mul_(lam).add_(rolled)
            else:
                rolled = x.roll(1, 0)
                t, l, h, w = box
                x[:, :, t:t + h, l:l + w] = rolled[:, :, t:t + h, l:l + w]
            rolled_t.mul_(1.0 - lam)
            target.mul_(lam).add_(rolled_t)
            return x
        return run

    cases = [("normalise only", [], False, "none"),
             ("+ erasing value 0", rects, False, "none"),
             ("+ erasing 'random'", rects, True, "none"),
             ("+ MixUp", [], False, "mixup"),
             ("+ CutMix", [], False, "cutmix"),
             ("erasing 0 + MixUp", rects, False, "mixup")]
    rows = []
    print(f"batch {n} x {s}x{s}x3 uint8 NHWC -> float32 NCHW, "
          f"{len(rects)} samples erased, 1 thread, median of {args.repeats}")
    print("| case | batchd ms/batch | torchvision ms/batch | torchvision / "
          "batchd |")
    print("|---|---|---|---|")
    for name, rect_list, noise, kind in cases:
        ours = timed(batchd(rect_list, noise, kind), args.repeats)
        theirs = timed(torchvision_side(rect_list, noise, kind), args.repeats)
        # Both sides computed the same batch (noise aside): checked, so the
        # table never compares different work.
        batchd(rect_list, noise, kind)()
        want = torchvision_side(rect_list, noise, kind)()
        if not noise:
            worst = (out - want).abs().max().item()
            assert worst < 1e-5, f"{name}: outputs differ by {worst}"
        rows.append({"case": name, "batchd_ms": ours, "torchvision_ms": theirs})
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
