#!/usr/bin/env python3
"""Self-supervised SimCLR on batchd's multi-view plans: two views of each
image, each its own crop, flip and colour ops, cut by the daemon from one
decode, trained with the NT-Xent loss on a small ResNet-style CNN (CPU):

    /usr/bin/python3 examples/train_simclr.py --images data/tiny \\
        --build build --steps 20

With --endpoint the example reads --dataset from a running daemon;
otherwise it starts BUILD/server/batchd on --images (an ImageFolder
directory, written by BUILD/tools/make_dataset when it does not exist)
and stops it at the end. Each step prints its NT-Xent loss.
"""
import argparse
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", required=True,
                   help="ImageFolder directory (created if missing)")
    p.add_argument("--count", type=int, default=128,
                   help="images to write when --images does not exist")
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--endpoint", help="a running daemon (else one is started)")
    p.add_argument("--dataset", default="images",
                   help="dataset name at --endpoint")
    p.add_argument("--size", type=int, default=32, help="view side, pixels")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--daemon-workers", type=int, default=2)
    return p.parse_args(argv)


def simclr_views(size):
    """SimCLR's augmentation as one group of two views: RandomResizedCrop
    (0.08-1), flip, ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8,
    RandomGrayscale(0.2); each view draws its own."""
    from batchd import augment as A
    ops = [A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8), A.RandomGrayscale(p=0.2)]
    return [A.ViewGroup(count=2, size=size, scale=(0.08, 1.0), augment=ops)]


def model(dim=32):
    """A small ResNet-ish encoder (two residual stages) and a projection
    head."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Identity() if stride == 1 and cin == cout else
                         nn.Sequential(nn.Conv2d(cin, cout, 1, stride,
                                                 bias=False),
                                       nn.BatchNorm2d(cout)))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Block(16, 16, 1), Block(16, 32, 2), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, dim))


def nt_xent(z1, z2, temperature):
    """SimCLR's NT-Xent: each view's positive is the other view of its
    image, its negatives the 2(B-1) other views of the batch."""
    import torch
    import torch.nn.functional as F
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    logits = z @ z.t() / temperature
    logits.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import batchd

    torch.manual_seed(0)
    root = pathlib.Path(args.images)
    daemon = None
    endpoint = args.endpoint
    if endpoint is None:
        if not root.exists():
            subprocess.run([str(pathlib.Path(args.build) / "tools" /
                                "make_dataset"), "--out", str(root),
                            "--images", str(args.count), "--classes", "4"],
                           check=True, stdout=subprocess.DEVNULL)
        sys.path.insert(0, str(REPO / "testing" / "python"))
        from batchd_testing.daemon import Daemon, daemon_binary
        daemon = Daemon(daemon_binary(args.build), {args.dataset: root},
                        ["--workers", str(args.daemon_workers)])
        endpoint = daemon.endpoint
    try:
        net = model()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        loader = batchd.Loader(endpoint, args.dataset, args.batch_size,
                               views=simclr_views(args.size), drop_last=True,
                               normalize=batchd.IMAGENET_NORMALIZE,
                               report=False)
        print(f"SimCLR on cpu, 2 views of {args.size}x{args.size}, batch "
              f"{args.batch_size}, {args.steps} steps", flush=True)
        step, epoch, start = 0, 0, time.monotonic()
        while step < args.steps:
            loader.set_epoch(epoch)
            for (view1, view2), _ in loader:
                loss = nt_xent(net(view1), net(view2), args.temperature)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                print(f"step {step}: loss {float(loss):.4f}", flush=True)
                if step == args.steps:
                    break
            epoch += 1
        print(f"{step} steps in {time.monotonic() - start:.1f} s")
        loader.close()
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    main()
