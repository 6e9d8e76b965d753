#!/usr/bin/python3
"""Image + caption batches against image-only batches, side by side over
the same img2dataset-style shards (jpg + txt + json per key, captions of
40..400 bytes in Latin, CJK and emoji).

One daemon (--workers, default 2), one batchd.Loader per configuration
(RandomResizedCrop --size + flip, uint8, batch --batch-size): image-only,
and fields=["txt", "json"]. Each repeat runs one epoch of each,
alternating which goes first, so that both share the machine's noise;
reports the median images/s of each and their ratio.

  /usr/bin/python3 bench/text_fields.py --build build --images 1000
"""
import argparse
import io
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "python"),
                os.path.join(ROOT, "testing", "python")]
from batchd_testing.daemon import Daemon, daemon_binary  # noqa: E402

WORDS = ["a red bicycle by the sea", "日本語のキャプション",
         "🐱 cat 😀 emoji", "Ünïcödé façade café"]


def write_shards(build, images, out):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([os.path.join(build, "tools", "make_dataset"), "--out",
                        tmp, "--images", str(images), "--classes", "10",
                        "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        files = sorted(pathlib.Path(tmp).rglob("*.jpg"))
        out.mkdir(parents=True)
        for s in range(0, len(files), 100):
            with tarfile.open(out / f"{s // 100:05d}.tar", "w") as tar:
                for i, f in enumerate(files[s:s + 100], start=s):
                    text = " ".join([WORDS[i % 4]] * (1 + i % 16))
                    members = {"jpg": f.read_bytes(), "txt": text.encode(),
                               "json": json.dumps({"caption": text,
                                                   "id": i}).encode()}
                    for ext, data in members.items():
                        info = tarfile.TarInfo(f"{i:08d}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))


def epoch_rate(endpoint, args, fields, epoch):
    import batchd
    options = dict(size=args.size, seed=1, rank=0, world_size=1,
                   report=False, shared_memory=False)
    if fields:
        options["fields"] = fields
    with batchd.Loader(endpoint, "captions", args.batch_size,
                       **options) as loader:
        loader.set_epoch(epoch)
        images = 0
        started = time.perf_counter()
        for batch in loader:
            images += batch[0].shape[0]
        return images / (time.perf_counter() - started)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    with tempfile.TemporaryDirectory() as tmp:
        shards = pathlib.Path(tmp) / "shards"
        write_shards(args.build, args.images, shards)
        daemon = Daemon(daemon_binary(args.build), {"captions": shards},
                        ["--workers", str(args.workers)])
        try:
            rates = {"image-only": [], "image+txt+json": []}
            configs = [("image-only", None),
                       ("image+txt+json", ["txt", "json"])]
            epoch_rate(daemon.endpoint, args, None, 99)  # warm the page cache
            for repeat in range(args.repeats):
                order = configs if repeat % 2 == 0 else configs[::-1]
                for name, fields in order:
                    rates[name].append(
                        epoch_rate(daemon.endpoint, args, fields, repeat))
        finally:
            daemon.stop()
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, r in rates.items():
        print(f"{name}: median {medians[name]:.1f} images/s "
              f"({', '.join(f'{x:.0f}' for x in r)})")
    print(f"ratio image+txt+json / image-only: "
          f"{medians['image+txt+json'] / medians['image-only']:.3f}")


if __name__ == "__main__":
    main()
