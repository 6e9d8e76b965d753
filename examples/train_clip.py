#!/usr/bin/env python3
"""A small image-text contrastive (CLIP-style) training loop over
img2dataset-style WebDataset shards (<key>.jpg + .txt + .json per key),
reading images and captions together from batchd.

A tiny CNN image tower and a bag-of-words text tower (hashed tokens, an
EmbeddingBag) are trained with the symmetric CLIP loss on the CPU:

    /usr/bin/python3 examples/train_clip.py --shards data/captions \\
        --build build --steps 20

With --endpoint the example reads --dataset from a running daemon;
otherwise it starts BUILD/server/batchd on the --shards directory (a
directory of .tar shards; written from BUILD/tools/make_dataset images
with synthetic captions when it does not exist) with the repository's
launcher (testing/python/batchd_testing) and stops it at the end.
"""
import argparse
import io
import json
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "grey",
           "black"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", required=True,
                   help="directory of .tar shards (created if missing)")
    p.add_argument("--images", type=int, default=256,
                   help="images to write when --shards does not exist")
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--endpoint", help="a running daemon (else one is started)")
    p.add_argument("--dataset", default="captions",
                   help="dataset name at --endpoint")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--caption-bytes", type=int, default=256,
                   help="the plan's bound on each caption, bytes")
    p.add_argument("--vocab", type=int, default=4096,
                   help="hashed bag-of-words buckets")
    p.add_argument("--dim", type=int, default=64, help="embedding width")
    p.add_argument("--daemon-workers", type=int, default=2)
    return p.parse_args(argv)


def write_shards(args, out):
    """Shards in img2dataset's layout from make_dataset's images, each
    captioned with its class's colour word (so the towers have something
    to align) and a json with the caption."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(pathlib.Path(args.build) / "tools" /
                            "make_dataset"), "--out", tmp, "--images",
                        str(args.images), "--classes", "8", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        classes = sorted(p for p in pathlib.Path(tmp).iterdir() if p.is_dir())
        files = [(c, f) for c, d in enumerate(classes)
                 for f in sorted(d.iterdir())]
        out.mkdir(parents=True)
        per_shard = 64
        for s in range(0, len(files), per_shard):
            with tarfile.open(out / f"{s // per_shard:05d}.tar", "w") as tar:
                for i, (c, f) in enumerate(files[s:s + per_shard], start=s):
                    text = f"a photo of something {COLOURS[c % len(COLOURS)]}"
                    members = {"jpg": f.read_bytes(), "txt": text.encode(),
                               "json": json.dumps({"caption": text}).encode()}
                    for ext, data in members.items():
                        info = tarfile.TarInfo(f"{i:08d}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))


def tokenize(texts, vocab):
    """Hashed bag of words: (flat token ids, offsets) for an EmbeddingBag,
    what a real tokenizer would hand the text tower."""
    import torch
    import zlib
    ids, offsets = [], []
    for text in texts:
        offsets.append(len(ids))
        words = re.findall(r"\w+", text.lower()) or [""]
        ids.extend(zlib.crc32(w.encode()) % vocab for w in words)
    return torch.tensor(ids), torch.tensor(offsets)


def build_model(args):
    import torch
    from torch import nn

    class Clip(nn.Module):
        def __init__(self):
            super().__init__()
            self.image = nn.Sequential(
                nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                nn.Linear(32, args.dim))
            self.text = nn.EmbeddingBag(args.vocab, args.dim, mode="mean")
            self.scale = nn.Parameter(torch.tensor(2.659))  # log(1 / 0.07)

        def forward(self, images, ids, offsets):
            i = nn.functional.normalize(self.image(images), dim=-1)
            t = nn.functional.normalize(self.text(ids, offsets), dim=-1)
            return self.scale.exp() * i @ t.t()

    return Clip()


def clip_loss(logits):
    import torch
    from torch import nn
    target = torch.arange(logits.shape[0])
    return (nn.functional.cross_entropy(logits, target) +
            nn.functional.cross_entropy(logits.t(), target)) / 2


def start_daemon(args, shards):
    sys.path.insert(0, str(REPO / "testing" / "python"))
    from batchd_testing.daemon import Daemon, daemon_binary
    return Daemon(daemon_binary(args.build), {args.dataset: shards},
                  ["--workers", str(args.daemon_workers)])


def main(argv=None):
    args = parse_args(argv)
    import torch
    import batchd

    torch.manual_seed(0)
    shards = pathlib.Path(args.shards)
    daemon = None
    endpoint = args.endpoint
    if endpoint is None:
        if not shards.exists():
            write_shards(args, shards)
        daemon = start_daemon(args, shards)
        endpoint = daemon.endpoint
    try:
        model = build_model(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        loader = batchd.Loader(
            endpoint, args.dataset, args.batch_size, size=args.image_size,
            normalize=((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
            fields={"txt": args.caption_bytes}, drop_last=True, rank=0,
            world_size=1)
        print(f"CLIP on cpu, {args.image_size}x{args.image_size}, batch "
              f"{args.batch_size}, {args.steps} steps")
        step, epoch, started = 0, 0, time.perf_counter()
        first = last = None
        while step < args.steps:
            loader.set_epoch(epoch)
            for images, texts in loader:
                ids, offsets = tokenize(texts, args.vocab)
                loss = clip_loss(model(images, ids, offsets))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                first = loss.item() if first is None else first
                last = loss.item()
                step += 1
                if step == args.steps:
                    break
            epoch += 1
        loader.close()
        elapsed = time.perf_counter() - started
        print(f"steps {step}, epochs {epoch}, "
              f"{step * args.batch_size / elapsed:.1f} pairs/s, loss "
              f"{first:.4f} -> {last:.4f}")
    finally:
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    main()
