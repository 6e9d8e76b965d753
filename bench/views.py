#!/usr/bin/python3
"""Decode once, augment N times: repeated augmentation x4 and a DINO
multi-view plan (2 views at 224, scale 0.4-1, + 6 at 96, scale 0.05-0.4),
each with reuse (decoded_max_side and the decoded-image cache) against the
same plans without reuse, and against torchvision's DataLoader doing the
same, side by side in one run on real photographs.

Data: an ImageFolder of JPEGs cut from real photographs (Debian's
python3-skimage sample images, as bench/webp_side_by_side.py), 400-640 x
300-480 pixels, quality 60-95, made once under data/bench-photos.

Configurations (all uint8 NCHW batches of 64 in this process, daemon with
2 workers on the same 2 cores):
  ra4 reuse      repeats=4, size 224, decoded_max_side 448, a decoded
                 cache of --cache-mb (the 4 repeats of an image are
                 adjacent in the order, so they hit; a small cache keeps
                 the next epoch decoding again)
  ra4 no reuse   repeats=4, decoded_max_side 0, no cache: every repeat a
                 region decode of the file
  dino reuse     Plan.views, decoded_max_side 448 and the cache
  dino 1 decode  Plan.views, decoded_max_side 0: one full decode a sample
  dino separate  the 8 views as 8 one-view plans (each view a region
                 decode of the file), read one after another
  torchvision    DataLoader(num_workers=2): RA as RASampler's order (each
                 index 4 times, each __getitem__ decoding the file); DINO
                 as DataAugmentationDINO (one PIL decode, 8 crops)
Figures: samples/s (an (image, repeat) for RA, an image with its 8 views
for DINO), median over --rounds of the median of --epochs epochs after a
warm-up epoch; configurations interleaved within a round.

  /usr/bin/python3 bench/views.py --build build
  /usr/bin/python3 bench/views.py --build build --smoke
"""
import argparse
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "testing", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from batchd_testing.daemon import Daemon, daemon_binary  # noqa: E402
from batchd_testing.photos import photo_image_folder  # noqa: E402

BATCH = 64
CAP = 448

def dino_groups():
    from batchd import augment as A
    return [A.ViewGroup(count=2, size=224, scale=(0.4, 1.0)),
            A.ViewGroup(count=6, size=96, scale=(0.05, 0.4))]


def batchd_epoch_rate(factories, epoch):
    """Samples/s of epoch `epoch` of the loaders `factories` make, read one
    after another (their samples counted once: they are views of the same
    samples). Each loader is made for this epoch only (epochs=epoch + 1),
    so none reads ahead into the next one while another configuration
    runs."""
    start = time.monotonic()
    samples = 0
    for i, factory in enumerate(factories):
        loader = factory(epoch + 1)
        loader.set_epoch(epoch)
        for _, labels in loader:
            if i == 0:
                samples += len(labels)
        loader.close()
    return samples / (time.monotonic() - start)


class PhotoFolder:
    """torchvision-style dataset: PIL decode in __getitem__, then
    `transform` (a list of transforms: one output per entry)."""

    def __init__(self, root, transforms):
        self.files = sorted(
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
            if f.endswith(".jpg"))
        self.transforms = transforms

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        from PIL import Image
        with Image.open(self.files[index]) as image:
            image = image.convert("RGB")
            views = [t(image) for t in self.transforms]
        return (views[0] if len(views) == 1 else views), index % 10


class RepeatSampler:
    """RASampler's single-rank order: a shuffled epoch, each index `reps`
    times in a row, cut to the dataset's length rounded down to 256."""

    def __init__(self, n, reps):
        self.n, self.reps, self.epoch = n, reps, 0

    def __iter__(self):
        order = list(range(self.n))
        random.Random(self.epoch).shuffle(order)
        self.epoch += 1
        repeated = [i for i in order for _ in range(self.reps)]
        return iter(repeated[:len(self)])

    def __len__(self):
        return self.n // 256 * 256 if self.n >= 256 else self.n


def torchvision_loader(root, dino, workers):
    import torch
    import torchvision.transforms as T

    def rrc(size, scale):
        return T.Compose([T.RandomResizedCrop(size, scale=scale),
                          T.RandomHorizontalFlip(), T.PILToTensor()])
    if dino:
        transforms = ([rrc(224, (0.4, 1.0))] * 2 +
                      [rrc(96, (0.05, 0.4))] * 6)
        dataset = PhotoFolder(root, transforms)
        sampler = None
    else:
        dataset = PhotoFolder(root, [rrc(224, (0.08, 1.0))])
        sampler = RepeatSampler(len(dataset), 4)
    return torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, shuffle=sampler is None, sampler=sampler,
        num_workers=workers, persistent_workers=workers > 0)


def torchvision_epoch_rate(loader, _epoch):
    start = time.monotonic()
    samples = 0
    for _, labels in loader:
        samples += len(labels)
    return samples / (time.monotonic() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--data", default=os.path.join(ROOT, "data",
                                                  "bench-photos"))
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cache-mb", type=int, default=48)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.smoke:
        args.data += "-smoke"
        args.images, args.epochs, args.rounds = 64, 1, 1
    photo_image_folder(args.data, args.images, format="JPEG")
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    import batchd

    def daemon(cache):
        flags = ["--workers", "2"]
        if cache:
            flags += ["--decoded-cache-bytes", str(args.cache_mb << 20)]
        return Daemon(daemon_binary(args.build), {"photos": args.data}, flags)

    cached, plain = daemon(True), daemon(False)

    def loader(endpoint, **kwargs):
        kwargs.setdefault("seed", 1)
        return lambda epochs: batchd.Loader(endpoint, "photos", BATCH,
                                            report=False, epochs=epochs,
                                            **kwargs)

    separate = ([loader(plain.endpoint, size=224, scale=(0.4, 1.0), seed=s,
                        shuffle=False) for s in range(2)] +
                [loader(plain.endpoint, size=96, scale=(0.05, 0.4),
                        seed=10 + s, shuffle=False) for s in range(6)])
    configs = {
        "ra4 reuse": (batchd_epoch_rate, [loader(
            cached.endpoint, size=224, repeats=4, decoded_max_side=CAP)]),
        "ra4 no reuse": (batchd_epoch_rate, [loader(
            plain.endpoint, size=224, repeats=4)]),
        "ra4 torchvision": (torchvision_epoch_rate,
                            torchvision_loader(args.data, False, 2)),
        "dino reuse": (batchd_epoch_rate, [loader(
            cached.endpoint, views=dino_groups(), decoded_max_side=CAP)]),
        "dino 1 decode": (batchd_epoch_rate, [loader(
            plain.endpoint, views=dino_groups())]),
        "dino separate": (batchd_epoch_rate, separate),
        "dino torchvision": (torchvision_epoch_rate,
                             torchvision_loader(args.data, True, 2)),
    }
    rates = {name: [] for name in configs}
    epoch = 0
    for name, (rate, target) in configs.items():  # warm-up
        rate(target, epoch)
    for _ in range(args.rounds):
        for name, (rate, target) in configs.items():
            per_epoch = [rate(target, epoch + 1 + e)
                         for e in range(args.epochs)]
            rates[name].append(statistics.median(per_epoch))
        epoch += args.epochs
    cached.stop()
    plain.stop()
    median = {name: statistics.median(r) for name, r in rates.items()}
    for name, r in rates.items():
        print(f"{name:18s} {median[name]:8.1f} samples/s "
              f"(min {min(r):.1f}, max {max(r):.1f})")
    for plan in ("ra4", "dino"):
        base = "dino separate" if plan == "dino" else "ra4 no reuse"
        print(f"{plan}: reuse / no reuse {median[plan + ' reuse'] / median[base]:.2f}x, "
              f"reuse / torchvision "
              f"{median[plan + ' reuse'] / median[plan + ' torchvision']:.2f}x")


if __name__ == "__main__":
    main()
