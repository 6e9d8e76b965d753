#!/usr/bin/env python3
"""Trains a torchvision ResNet-18 reading batches from batchd, then from a
torchvision DataLoader on the same images, and says which run waited for
input.

For each run it prints the step time, the fraction of wall time spent
waiting for data, and a verdict: input-bound (the model waited for data
more than --input-bound-threshold of the time) or compute-bound.

    /usr/bin/python3 examples/train_resnet.py --data data/demo \\
        --build build --image-size 64 --batch-size 32 --steps 20

With --endpoint the batchd run uses a daemon already serving the dataset
(as --dataset); otherwise the example starts BUILD/server/batchd on the
--data directory (an ImageFolder; generated with BUILD/tools/make_dataset
when it does not exist) with the repository's launcher (batchd_testing in
testing/python) and stops it at the end. Runs on the CPU unless
--device says otherwise.

The augmentation flags are those of torchvision's classification reference
(--auto-augment, --ra-magnitude, --augmix-severity, --interpolation,
--train-crop-size, --val-resize-size, --val-crop-size, --random-erase,
--mixup-alpha, --cutmix-alpha, --label-smoothing, --ra-sampler,
--ra-reps); both runs compute the same recipe: batchd through
batchd.augment.reference_recipe, the DataLoader through the torchvision
transforms the reference's presets build, with the reference's RASampler
and its MixUp/CutMix collate written out here. The full ResNet-50
recipe (IMAGENET1K_V2) at this example's scale:

    /usr/bin/python3 examples/train_resnet.py --data data/demo \\
        --build build --auto-augment ta_wide --train-crop-size 176 \\
        --val-resize-size 232 --random-erase 0.1 --mixup-alpha 0.2 \\
        --cutmix-alpha 1.0 --label-smoothing 0.1 --ra-sampler --ra-reps 4
 --eval-steps adds an evaluation pass (resize, centre crop) to each
run:

    /usr/bin/python3 examples/train_resnet.py --data data/demo \\
        --build build --auto-augment ta_wide --train-crop-size 176 \\
        --val-resize-size 232 --val-crop-size 224 --eval-steps 5
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True,
                   help="ImageFolder directory (created if missing)")
    p.add_argument("--images", type=int, default=512,
                   help="images to generate when --data does not exist")
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--endpoint", help="a running daemon (else one is started)")
    p.add_argument("--dataset", default="train",
                   help="dataset name at --endpoint")
    p.add_argument("--daemon-workers", type=int, default=os.cpu_count(),
                   help="decode workers of the daemon this example starts")
    p.add_argument("--image-size", type=int, default=64,
                   help="default of the crop sizes below")
    p.add_argument("--train-crop-size", type=int,
                   help="RandomResizedCrop size (default --image-size)")
    p.add_argument("--val-crop-size", type=int,
                   help="evaluation centre crop (default --image-size)")
    p.add_argument("--val-resize-size", type=int,
                   help="evaluation resize of the shorter side (default "
                        "val crop * 256 / 224)")
    p.add_argument("--interpolation", default="bilinear",
                   choices=["bilinear", "bicubic"],
                   help="the crop's (and the evaluation resize's)")
    p.add_argument("--auto-augment", default=None,
                   choices=["ta_wide", "ra", "augmix", "imagenet", "cifar10",
                            "svhn"],
                   help="the reference's policy after crop and flip")
    p.add_argument("--ra-magnitude", type=int, default=9,
                   help="RandAugment's magnitude (--auto-augment ra)")
    p.add_argument("--augmix-severity", type=int, default=3,
                   help="AugMix's severity (--auto-augment augmix)")
    p.add_argument("--random-erase", type=float, default=0.0,
                   help="RandomErasing probability, after Normalize")
    p.add_argument("--mixup-alpha", type=float, default=0.0,
                   help="MixUp's Beta(alpha, alpha) (0: none)")
    p.add_argument("--cutmix-alpha", type=float, default=0.0,
                   help="CutMix's Beta(alpha, alpha) (0: none)")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--ra-sampler", action="store_true",
                   help="repeated augmentation (RASampler)")
    p.add_argument("--ra-reps", type=int, default=3,
                   help="repetitions of each image with --ra-sampler")
    p.add_argument("--eval-steps", type=int, default=0,
                   help="evaluation batches after training (0: none)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps before timing")
    p.add_argument("--num-workers", type=int, default=0,
                   help="DataLoader worker processes")
    p.add_argument("--pin-memory", action="store_true",
                   help="DataLoader pin_memory")
    p.add_argument("--prefetch", type=int, default=4, help="batchd slots")
    p.add_argument("--loaders", default="batchd,dataloader",
                   help="comma-separated: batchd, dataloader")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0: leave as is)")
    p.add_argument("--input-bound-threshold", type=float, default=0.10,
                   help="waiting fraction above which a run is input-bound")
    args = p.parse_args(argv)
    args.train_crop_size = args.train_crop_size or args.image_size
    args.val_crop_size = args.val_crop_size or args.image_size
    args.val_resize_size = (args.val_resize_size or
                            args.val_crop_size * 256 // 224)
    return args


def ensure_dataset(args):
    data = pathlib.Path(args.data)
    if not data.exists():
        tool = pathlib.Path(args.build) / "tools" / "make_dataset"
        subprocess.run([str(tool), "--out", str(data), "--images",
                        str(args.images), "--classes", "10", "--seed", "1"],
                       check=True)
    return data


def start_daemon(args, data):
    """batchd serving `data` as dataset 'train' for the length of a run,
    started by the repository's launcher (testing/python/batchd_testing);
    the caller stop()s it."""
    sys.path.insert(0, str(REPO / "testing" / "python"))
    try:
        from batchd_testing.daemon import Daemon, daemon_binary
    except ImportError:
        raise SystemExit(f"starting a daemon needs the batchd source tree "
                         f"({REPO / 'testing' / 'python'}); or pass "
                         f"--endpoint of a running daemon") from None
    return Daemon(daemon_binary(args.build), {"train": data},
                  ["--workers", str(args.daemon_workers)])


def batchd_batches(args, endpoint, dataset, num_classes, train=True):
    """Batches of the reference recipe the flags name (normalised with
    ImageNet's mean and std, as the reference's presets do; erased, mixed
    and repeated by the daemon's draws)."""
    import batchd
    recipe = batchd.augment.reference_recipe(args, num_classes=num_classes)
    loader = batchd.Loader(endpoint, dataset, args.batch_size,
                           **(recipe.train if train else recipe.eval),
                           shuffle=train, device=args.device,
                           prefetch=args.prefetch, drop_last=True, rank=0,
                           world_size=1)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def torchvision_transform(args, normalize, train=True):
    """The reference's ClassificationPresetTrain / ClassificationPresetEval
    for the flags. Its policy runs bilinear, as batchd runs it (the ops have
    no bicubic; docs/augment.md)."""
    from torchvision import transforms
    mode = transforms.InterpolationMode(args.interpolation)
    if not train:
        steps = [transforms.Resize(args.val_resize_size, interpolation=mode),
                 transforms.CenterCrop(args.val_crop_size)]
    else:
        steps = [transforms.RandomResizedCrop(args.train_crop_size,
                                              interpolation=mode),
                 transforms.RandomHorizontalFlip()]
        policy = transforms.InterpolationMode.BILINEAR
        if args.auto_augment == "ta_wide":
            steps.append(transforms.TrivialAugmentWide(interpolation=policy))
        elif args.auto_augment == "ra":
            steps.append(transforms.RandAugment(
                magnitude=args.ra_magnitude, interpolation=policy))
        elif args.auto_augment == "augmix":
            steps.append(transforms.AugMix(severity=args.augmix_severity,
                                           interpolation=policy))
        elif args.auto_augment is not None:
            steps.append(transforms.AutoAugment(
                transforms.AutoAugmentPolicy(args.auto_augment),
                interpolation=policy))
    steps += [transforms.ToTensor(), transforms.Normalize(*normalize)]
    if train and args.random_erase > 0:
        steps.append(transforms.RandomErasing(p=args.random_erase))
    return transforms.Compose(steps)


def ra_sampler_indices(size, reps, epoch, seed=0):
    """The reference's RASampler on one rank: each index of a permutation
    `reps` times in a row, cut to floor(size // 256 * 256) (all of it
    below 256 images, as batchd does)."""
    import torch
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = [i for i in torch.randperm(size, generator=g).tolist()
             for _ in range(reps)]
    keep = size // 256 * 256 if size >= 256 else size
    return order[:keep]


def mix_collate(args, num_classes):
    """The reference's RandomChoice([RandomMixup, RandomCutmix]) after
    default_collate (references/classification/transforms.py), written
    from its definition: one of the two per batch, lambda from
    Beta(alpha, alpha), the batch rolled by one, one-hot targets."""
    import math
    import random

    import torch
    from torch.utils.data import default_collate

    def mix(batch):
        images, labels = default_collate(batch)
        target = torch.nn.functional.one_hot(labels, num_classes).float()
        kinds = [k for k, a in (("mixup", args.mixup_alpha),
                                ("cutmix", args.cutmix_alpha)) if a > 0]
        kind = random.choice(kinds)
        alpha = args.mixup_alpha if kind == "mixup" else args.cutmix_alpha
        lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
        rolled = images.roll(1, 0)
        if kind == "mixup":
            images = images * lam + rolled * (1 - lam)
        else:
            h, w = images.shape[-2:]
            cx, cy = int(torch.randint(w, (1,))), int(torch.randint(h, (1,)))
            ratio = math.sqrt(1.0 - lam)
            rw, rh = int(ratio * w), int(ratio * h)
            x1, y1 = max(cx - rw // 2, 0), max(cy - rh // 2, 0)
            x2, y2 = min(cx + rw // 2, w), min(cy + rh // 2, h)
            images = images.clone()
            images[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
            lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
        return images, target * lam + target.roll(1, 0) * (1 - lam)
    return mix


def dataloader_batches(args, data, normalize, num_classes, train=True):
    import torch
    from torchvision import datasets
    dataset = datasets.ImageFolder(str(data), transform=torchvision_transform(
        args, normalize, train))
    mixing = train and (args.mixup_alpha > 0 or args.cutmix_alpha > 0)
    repeated = train and args.ra_sampler
    sampler = None
    if repeated:
        sampler = ra_sampler_indices(len(dataset), args.ra_reps, epoch=0)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=train and not repeated,
        sampler=sampler, drop_last=True, num_workers=args.num_workers,
        pin_memory=args.pin_memory, persistent_workers=args.num_workers > 0,
        collate_fn=mix_collate(args, num_classes) if mixing else None)
    epoch = 0
    while True:
        if repeated:
            sampler[:] = ra_sampler_indices(len(dataset), args.ra_reps, epoch)
        epoch += 1
        for images, labels in loader:
            yield (images.to(args.device, non_blocking=True),
                   labels.to(args.device, non_blocking=True))


def train(args, name, batches, num_classes):
    """Runs warmup + timed steps; returns (step s, waiting fraction)."""
    import torch
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=num_classes)
    model.to(args.device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # As the reference: the loss smooths the labels, except batchd's mixed
    # labels, which come smoothed (batchd.augment.reference_recipe notes).
    mixed = args.mixup_alpha > 0 or args.cutmix_alpha > 0
    loss_fn = torch.nn.CrossEntropyLoss(
        label_smoothing=0.0 if mixed and name == "batchd"
        else args.label_smoothing)
    sync = (torch.cuda.synchronize if args.device.startswith("cuda")
            else (lambda: None))
    waited = 0.0
    started = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            sync()
            waited = 0.0
            started = time.perf_counter()
        before = time.perf_counter()
        images, labels = next(batches)
        if args.device.startswith("cuda"):
            torch.cuda.current_stream().synchronize()
        waited += time.perf_counter() - before
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        del images, labels
    sync()
    wall = time.perf_counter() - started
    return model, (wall / args.steps, waited / wall, float(loss))


def evaluate(args, model, batches):
    """--eval-steps batches through the trained model; returns (images/s,
    top-1 accuracy)."""
    import torch
    model.eval()
    correct = images_seen = 0
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(args.eval_steps):
            images, labels = next(batches)
            correct += int((model(images).argmax(1) == labels).sum())
            images_seen += labels.numel()
    return images_seen / (time.perf_counter() - started), correct / images_seen


def report(args, name, step_s, wait_fraction, loss):
    verdict = ("input-bound" if wait_fraction > args.input_bound_threshold
               else "compute-bound")
    images_per_s = args.batch_size / step_s
    print(f"{name}: step {step_s * 1e3:.1f} ms, {images_per_s:.1f} images/s, "
          f"waiting for data {100 * wait_fraction:.1f}% of wall time, "
          f"loss {loss:.3f}", flush=True)
    print(f"{name}: verdict: {verdict} (waiting "
          f"{100 * wait_fraction:.1f}% vs threshold "
          f"{100 * args.input_bound_threshold:.0f}%)", flush=True)


def main(argv):
    args = parse_args(argv)
    # The module is built into BUILD/python; find it there without PYTHONPATH.
    sys.path.insert(0, str(pathlib.Path(args.build).resolve() / "python"))
    import torch
    import batchd
    if args.threads:
        torch.set_num_threads(args.threads)
    data = ensure_dataset(args)
    num_classes = sum(1 for p in data.iterdir() if p.is_dir())
    normalize = batchd.IMAGENET_NORMALIZE
    crop = args.train_crop_size
    print(f"ResNet-18 on {args.device}, {crop}x{crop}, batch "
          f"{args.batch_size}, {args.steps} timed steps after {args.warmup} "
          f"warmup; torch threads {torch.get_num_threads()}; "
          f"{args.interpolation}, auto-augment {args.auto_augment or 'none'}",
          flush=True)
    for name in args.loaders.split(","):
        if name == "batchd":
            daemon = None
            endpoint, dataset = args.endpoint, args.dataset
            if endpoint is None:
                daemon = start_daemon(args, data)
                endpoint, dataset = daemon.endpoint, "train"
            make = lambda train: batchd_batches(  # noqa: E731
                args, endpoint, dataset, num_classes, train)
            label = f"batchd (prefetch {args.prefetch})"
        elif name == "dataloader":
            daemon = None
            make = lambda train: dataloader_batches(  # noqa: E731
                args, data, normalize, num_classes, train)
            label = (f"DataLoader (num_workers {args.num_workers}, "
                     f"pin_memory {args.pin_memory})")
        else:
            raise SystemExit(f"unknown loader {name!r}")
        try:
            batches = make(True)
            model, result = train(args, name, batches, num_classes)
            batches.close()
            report(args, label, *result)
            if args.eval_steps > 0:
                batches = make(False)
                rate, accuracy = evaluate(args, model, batches)
                batches.close()
                print(f"{label}: eval (resize {args.val_resize_size}, crop "
                      f"{args.val_crop_size}): {rate:.1f} images/s, top-1 "
                      f"{100 * accuracy:.1f}%", flush=True)
        finally:
            if daemon is not None:
                daemon.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
