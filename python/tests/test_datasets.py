"""Datasets beyond JPEG folders, against a real daemon: PNG samples decode to
the same pixels as Pillow (the reference decoder), and a WebDataset shard
written by Python's tarfile the way webdataset's TarWriter writes it is
served exactly like the ImageFolder it came from."""
import io
import pathlib
import struct
import tarfile
import time
import zlib

import numpy as np
import pytest
from PIL import Image

import batchd
from batchd.errors import InvalidArgumentError
from batchd_testing.daemon import Daemon
from batchd_testing.datasets import count_images, image_files
from conftest import fnv1a64

SIDE = 24  # square images: an eval plan at this size is the identity


def png_rgb16(path, pixels):
    """Writes a 16-bit RGB PNG (Pillow cannot) from a uint16 HxWx3 array."""
    height, width, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes()
                   for y in range(height))

    def chunk(kind, data):
        body = kind + data
        return (struct.pack(">I", len(data)) + body
                + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF))

    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                  16, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))


def scale16(values):
    """16 to 8 bits as the daemon scales: round(v * 255 / 65535)."""
    return np.floor(values.astype(np.float64) * 255 / 65535 + 0.5).astype(
        np.uint8)


def identity_batch(daemon, dataset, count):
    """All `count` samples in index order at their own size, NHWC."""
    with batchd.Loader(daemon.endpoint, dataset, count, mode="eval",
                       size=SIDE, resize_shorter=SIDE, layout="nhwc",
                       shuffle=False, seed=0, rank=0, world_size=1) as loader:
        images, labels = next(iter(loader))
        return images.numpy(), labels.tolist()


def test_the_benchmarks_image_count_is_the_daemons(binaries, dataset_dir,
                                                   tmp_path):
    """batchd_testing.datasets, which the benchmarks count images with,
    finds what the daemon serves on an ImageNet-style tree (*.JPEG), with
    .jpg and .png beside it and files the daemon skips."""
    jpegs = sorted(dataset_dir.rglob("*.jpg"))
    root = tmp_path / "imagenet"
    for i, source in enumerate(jpegs[:12]):
        name = ("n01/img{:02d}.JPEG", "n02/img{:02d}.jpg",
                "n02/deep/img{:02d}.jpeg")[i % 3].format(i)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(source.read_bytes())
    (root / "n03").mkdir()
    Image.new("RGB", (SIDE, SIDE), (9, 99, 199)).save(root / "n03" / "a.PNG")
    (root / "n03" / "notes.txt").write_text("not an image")
    (root / "n03" / ".hidden.JPEG").write_bytes(jpegs[0].read_bytes())
    assert count_images(root) == 13

    daemon = Daemon(binaries["daemon"], {"imagenet": root},
                    ["--workers", "2"], directory=tmp_path / "daemon")
    try:
        [(name, samples, classes)] = batchd.list_datasets(daemon.endpoint)
        assert (name, samples, classes) == ("imagenet", 13,
                                            ["n01", "n02", "n03"])
        _, labels = identity_batch(daemon, "imagenet", samples)
        assert labels == [label for _, label in image_files(root)]
    finally:
        daemon.stop()


def test_png_pixels_equal_pillow(binaries, tmp_path):
    rng = np.random.default_rng(3)
    folder = tmp_path / "pngs" / "c"
    folder.mkdir(parents=True)
    rgb = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    rgba = rng.integers(0, 256, (SIDE, SIDE, 4), dtype=np.uint8)
    gray = rng.integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
    gray16 = rng.integers(0, 65536, (SIDE, SIDE), dtype=np.uint16)
    rgb16 = rng.integers(0, 65536, (SIDE, SIDE, 3), dtype=np.uint16)

    Image.fromarray(rgb, "RGB").save(folder / "a_rgb.png")
    Image.fromarray(rgba, "RGBA").save(folder / "b_rgba.png")
    Image.fromarray(gray, "L").save(folder / "c_gray.png")
    Image.fromarray(np.stack([gray, gray[::-1]], axis=2), "LA").save(
        folder / "d_gray_alpha.png")
    palette = Image.fromarray(rgb, "RGB").quantize(colors=16)
    # A transparent palette entry: alpha is dropped, the colour kept.
    palette.save(folder / "e_palette.png", transparency=3)
    Image.fromarray(gray > 127).save(folder / "f_bilevel.png")  # 1-bit gray
    Image.fromarray(gray16, "I;16").save(folder / "g_gray16.png")
    png_rgb16(folder / "h_rgb16.png", rgb16)
    names = sorted(p.name for p in folder.iterdir())

    daemon = Daemon(binaries["daemon"], {"pngs": tmp_path / "pngs"},
                    ["--workers", "2"], directory=tmp_path / "daemon")
    try:
        images, labels = identity_batch(daemon, "pngs", len(names))
    finally:
        daemon.stop()
    assert images.shape == (len(names), SIDE, SIDE, 3)
    assert labels == [0] * len(names)
    for position, name in enumerate(names):
        path = folder / name
        if name == "g_gray16.png":
            expected = np.repeat(scale16(np.array(Image.open(path)))[:, :, None],
                                 3, axis=2)
            assert np.array(Image.open(path)).dtype != np.uint8  # 16-bit read
        elif name == "h_rgb16.png":
            expected = scale16(rgb16)
        else:
            expected = np.array(Image.open(path).convert("RGB"))
        np.testing.assert_array_equal(images[position], expected,
                                      err_msg=name)


def write_webdataset_shard(path, samples):
    """As webdataset.TarWriter: a stream-mode tar, one member per field,
    named <key>.<field>, with its uname/gname/mode/mtime conventions."""
    with open(path, "wb") as stream:
        with tarfile.open(fileobj=stream, mode="w|",
                          format=tarfile.PAX_FORMAT) as tar:
            for sample in samples:
                key = sample["__key__"]
                for field, value in sample.items():
                    if field.startswith("__"):
                        continue
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(value)
                    info.mtime = time.time()
                    info.mode = 0o0444
                    info.uname = "bigdata"
                    info.gname = "bigdata"
                    tar.addfile(info, io.BytesIO(value))


def test_tarfile_webdataset_shard_is_read_like_the_folder(binaries, dataset_dir,
                                                          tmp_path):
    classes = sorted(p.name for p in pathlib.Path(dataset_dir).iterdir()
                     if p.is_dir())
    files = [(label, f) for label, c in enumerate(classes)
             for f in sorted((pathlib.Path(dataset_dir) / c).iterdir())]
    samples = []
    for index, (label, f) in enumerate(files):
        # Some keys live in subdirectories, one is long enough to need a pax
        # header, and extra fields ride along, as in real shards.
        key = f"part{index % 2}/{index:06d}"
        if index == 5:
            key = "long/" + "k" * 150 + f"{index:06d}"
        samples.append({"__key__": key, "jpg": f.read_bytes(),
                        "cls": str(label).encode(),
                        "json": b'{"source": "test"}'})
    shards = tmp_path / "wds"
    shards.mkdir()
    half = len(samples) // 2
    write_webdataset_shard(shards / "train-000000.tar", samples[:half])
    write_webdataset_shard(shards / "train-000001.tar", samples[half:])
    (shards / "classes.txt").write_text("".join(c + "\n" for c in classes))

    daemon = Daemon(binaries["daemon"], {"folder": dataset_dir,
                                         "wds": shards},
                    ["--workers", "2"], directory=tmp_path / "daemon")
    try:
        results = {}
        for name in ("folder", "wds"):
            with batchd.Loader(daemon.endpoint, name, 8, size=32, seed=9,
                               layout="nhwc", rank=0, world_size=1) as loader:
                loader.set_epoch(1)
                results[name] = [(fnv1a64(images.numpy().tobytes()),
                                  labels.tolist())
                                 for images, labels in loader]
    finally:
        daemon.stop()
    assert len(results["wds"]) == (len(files) + 7) // 8
    assert results["wds"] == results["folder"]
    log = daemon.log_path.read_text()
    assert "damage" not in log and "skipped" not in log, log


def test_shard_aware_shuffle_over_webdataset_shards(binaries, dataset_dir,
                                                     tmp_path):
    """shuffle_window_shards: every sample once per epoch, the same order
    for the same plan and another one per epoch, never more than the
    window's shards being read at once; refused on a folder."""
    files = sorted(f for c in sorted(pathlib.Path(dataset_dir).iterdir())
                   if c.is_dir() for f in sorted(c.iterdir()))
    per_shard = 8
    shards = tmp_path / "wds"
    shards.mkdir()
    for s in range(len(files) // per_shard):
        write_webdataset_shard(
            shards / f"train-{s:06d}.tar",
            [{"__key__": f"{i:06d}", "jpg": files[i].read_bytes(),
              "cls": b"0"}
             for i in range(s * per_shard, (s + 1) * per_shard)])
    daemon = Daemon(binaries["daemon"], {"folder": dataset_dir,
                                         "wds": shards},
                    ["--workers", "2"], directory=tmp_path / "daemon")

    def order(epoch, window, dataset="wds"):
        with batchd.Loader(daemon.endpoint, dataset, 4, size=16, seed=3,
                           shuffle_window_shards=window, layout="nhwc",
                           rank=0, world_size=1) as loader:
            loader.set_epoch(epoch)
            indices = []
            for _ in loader:
                indices += list(loader.sample_indices)
            return indices

    try:
        first = order(0, 2)
        assert sorted(first) == list(range(len(files)))
        assert order(0, 2) == first
        assert order(1, 2) != first
        assert order(0, 0) != first  # the per-sample shuffle
        # Samples are numbered shard by shard: at most 2 shards live (a
        # sample read and one still to come) at any position.
        span = {}
        for position, index in enumerate(first):
            shard = index // per_shard
            span[shard] = (span.get(shard, (position,))[0], position)
        for position in range(len(first)):
            live = sum(1 for a, b in span.values() if a <= position <= b)
            assert live <= 2, (position, span)
        with pytest.raises(InvalidArgumentError,
                           match="has no shards"):
            order(0, 2, dataset="folder")
    finally:
        daemon.stop()


def test_loader_over_an_s3_dataset_gets_the_local_shards_batches(
        binaries, dataset_dir, tmp_path):
    """The daemon does the fetching: a batchd.Loader over an s3:// dataset
    (shards in an S3-compatible store, signed requests, a shard cache) gets
    the same batches as over the same shards on local disk; the store's
    keys are in a credentials file only the daemon reads."""
    from batchd_testing.object_servers import S3Server, ACCESS_KEY, SECRET_KEY
    files = sorted(f for c in sorted(pathlib.Path(dataset_dir).iterdir())
                   if c.is_dir() for f in sorted(c.iterdir()))
    shards = tmp_path / "wds"
    shards.mkdir()
    per_shard = 10
    for s in range((len(files) + per_shard - 1) // per_shard):
        write_webdataset_shard(
            shards / f"train-{s:06d}.tar",
            [{"__key__": f"{i:06d}", "jpg": files[i].read_bytes(),
              "cls": str(i % 3).encode()}
             for i in range(s * per_shard, min(len(files), (s + 1) * per_shard))])
    build = pathlib.Path(binaries["daemon"]).parents[1]
    with S3Server(build, tmp_path / "s3", ["datasets"]) as s3:
        for shard in sorted(shards.iterdir()):
            s3.put_file("datasets", f"train/{shard.name}", shard)
        credentials = tmp_path / "credentials"
        credentials.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\n"
                               f"aws_secret_access_key = {SECRET_KEY}\n")
        config = tmp_path / "batchd.conf"
        config.write_text(
            'datasets { name: "s3" path: "s3://datasets/train/" '
            f'format: TAR_SHARDS endpoint: "{s3.endpoint}" '
            f'credentials_file: "{credentials}" }}\n')
        daemon = Daemon(binaries["daemon"], {"local": shards},
                        ["--workers", "2", "--config", config,
                         "--cache-dir", tmp_path / "cache",
                         "--cache-bytes", 1 << 30],
                        directory=tmp_path / "daemon")
        try:
            results = {}
            for name in ("local", "s3"):
                with batchd.Loader(daemon.endpoint, name, 8, size=32, seed=4,
                                   layout="nhwc", rank=0,
                                   world_size=1) as loader:
                    loader.set_epoch(0)
                    results[name] = [(fnv1a64(images.numpy().tobytes()),
                                      labels.tolist())
                                     for images, labels in loader]
        finally:
            daemon.stop()
    assert len(results["s3"]) == (len(files) + 7) // 8
    assert results["s3"] == results["local"]
