#!/usr/bin/python3
"""WebP side by side: the daemon's WebP decode + RandomResizedCrop 224 +
flip against PIL's WebP decode with torchvision's RandomResizedCrop(224) +
RandomHorizontalFlip in a DataLoader, per core (both pinned to core 0),
on the same WebP files, in one run.

The WebP files are made once with PIL from real photographs (Debian's
python3-skimage sample images: astronaut, coffee, chelsea, rocket, cat,
hubble_deep_field, immunohistochemistry, retina), each cut at random into
ImageNet-like crops of 400-640 x 300-480 pixels and saved lossy at
quality 60-95, into an ImageFolder (10 classes) under data/bench-webp.
Crop parameters: RandomResizedCrop's defaults on both sides (scale
0.08-1, ratio 3/4-4/3), output 224x224 uint8, flip probability 0.5.

Configurations, interleaved in each repeat (bench/side_by_side.py's
runners): batchd w=1 over shared memory (daemon + client CPU), and the
torchvision uint8 DataLoader with num_workers=0. A repeat's figure is the
median over its measured epochs; the report gives the median over repeats
with the min-max, and the ratio of images/s and of CPU per image.

  /usr/bin/python3 bench/webp_side_by_side.py --build build
  /usr/bin/python3 bench/webp_side_by_side.py --build build --smoke
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import side_by_side as sbs  # noqa: E402
from batchd_testing.photos import photo_image_folder  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--data", default=os.path.join(ROOT, "data", "bench-webp"))
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.epochs, args.repeats = 128, 1, 1
        args.data += "-smoke"
    photo_image_folder(args.data, args.images, format="WEBP",
                       mirror=True)
    configs = [
        ("batchd w=1, shared memory (WebP)",
         lambda: sbs.batchd(args.build, args.data, 1, "0", args.epochs)),
        ("torchvision uint8 nw=0 (PIL WebP)",
         lambda: sbs.torchvision(args.data, 0, "uint8", "0", args.epochs)),
    ]
    results = {name: [] for name, _ in configs}
    for repeat in range(args.repeats):
        for name, thunk in configs:
            row = thunk()
            results[name].append(row)
            print(f"repeat {repeat}: {name}: {row['images_per_s']:.0f} images/s, "
                  f"{row['cpu_per_image'] * 1e3:.2f} ms CPU/image", flush=True)
    print(f"\n{args.images} WebP images, {args.epochs} measured epochs x "
          f"{args.repeats} repeats, 1 core (taskset -c 0)")
    summary = {}
    for name, rows in results.items():
        rates = sbs.summarise([r["images_per_s"] for r in rows])
        cpu = sbs.summarise([r["cpu_per_image"] for r in rows])
        summary[name] = (rates, cpu)
        print(f"  {name:38s} {sbs.fmt(rates)} images/s, "
              f"{sbs.fmt(cpu, 2, 1e3)} ms CPU/image")
    (ours, ours_cpu), (theirs, theirs_cpu) = summary.values()
    ratio = ours["median"] / theirs["median"]
    cpu_ratio = theirs_cpu["median"] / ours_cpu["median"]
    print(f"\nWebP: batchd >= 2x the PIL + torchvision DataLoader per core: "
          f"{ratio:.2f}x images/s, {cpu_ratio:.2f}x images per CPU-second: "
          f"{'PASS' if min(ratio, cpu_ratio) >= 2.0 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
