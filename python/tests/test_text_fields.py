"""Fields beside the image (Plan.fields), end to end: img2dataset-style
shards written by Python's tarfile (jpg + txt + json per key, some keys
without txt, no cls) with captions in Latin, CJK and emoji, some long
enough to be cut inside a multi-byte character. Every caption arrives
byte-exact with its image, or cut at a character boundary and counted;
every key once per epoch; the same over local disk, S3, and shared
memory."""
import io
import json
import pathlib
import tarfile

import pytest

import batchd
from batchd.errors import InvalidArgumentError
from batchd_testing.daemon import Daemon
from conftest import fnv1a64

SIZE = 32
BATCH = 8
TXT_BYTES = 40
WORDS = ["a red bicycle by the sea", "日本語のキャプション、長い文章です。",
         "🐱 cat 😀 emoji 🚲", "Ünïcödé façade naïve café"]


def caption(i):
    """Sample i's caption: short ones, and ones past TXT_BYTES whose cut
    falls inside a multi-byte character (CJK and emoji ones do)."""
    words = WORDS[i % len(WORDS)]
    return words if i % 3 == 0 else " ".join([words] * (1 + i % 4))


def has_txt(i):
    return i % 7 != 5


def cut(text, limit):
    """The daemon's rule: at most `limit` bytes, never half a character."""
    data = text.encode()
    return data[:limit].decode("utf-8", errors="ignore")


def write_shards(directory, jpegs, per_shard=10):
    """img2dataset's layout: <key>.jpg, .txt, .json; no .cls."""
    directory.mkdir()
    expected = {}
    for s in range((len(jpegs) + per_shard - 1) // per_shard):
        with tarfile.open(directory / f"{s:05d}.tar", "w",
                          format=tarfile.PAX_FORMAT) as tar:
            for i in range(s * per_shard, min(len(jpegs), (s + 1) * per_shard)):
                key = f"{s:05d}{i:04d}"
                members = {"jpg": jpegs[i].read_bytes(),
                           "json": json.dumps({"caption": caption(i),
                                               "label": i % 5,
                                               "key": key}).encode()}
                if has_txt(i):
                    members["txt"] = caption(i).encode()
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                expected[key] = i
    return expected


@pytest.fixture(scope="module")
def shards(dataset_dir, tmp_path_factory):
    jpegs = sorted(p for p in pathlib.Path(dataset_dir).rglob("*.jpg"))
    root = tmp_path_factory.mktemp("fields")
    expected = write_shards(root / "shards", jpegs)
    return root / "shards", expected


@pytest.fixture(scope="module")
def daemon(binaries, shards, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fields-daemon")
    socket = directory / "b.sock"
    d = Daemon(binaries["daemon"], {"captions": shards[0]},
               ["--workers", "2", "--unix-socket", str(socket)],
               directory=directory)
    d.unix_endpoint = f"unix:{socket}"
    yield d
    d.stop()


def epoch(endpoint, dataset, **kwargs):
    """One epoch as dicts, batch by batch, with the field counts."""
    options = dict(size=SIZE, seed=3, rank=0, world_size=1,
                   fields={"txt": TXT_BYTES, "json": 0, "__key__": 0},
                   batch_format="dict", label_field="json:label",
                   shared_memory=False)
    options.update(kwargs)
    with batchd.Loader(endpoint, dataset, BATCH, **options) as loader:
        loader.set_epoch(1)
        out = []
        for batch in loader:
            out.append((fnv1a64(batch["image"].numpy().tobytes()),
                        batch["label"].tolist(), batch.get("txt"),
                        batch.get("json"), batch.get("__key__"),
                        loader.field_counts))
        return out


def check_epoch(batches, expected):
    seen = []
    for _, labels, texts, objects, keys, counts in batches:
        cut_count = missing_count = 0
        for label, text, obj, key in zip(labels, texts, objects, keys):
            i = expected[key]
            seen.append(key)
            assert obj == {"caption": caption(i), "label": i % 5, "key": key}
            assert label == i % 5
            if not has_txt(i):
                assert text == ""
                missing_count += 1
                continue
            assert text == cut(caption(i), TXT_BYTES), key
            cut_count += len(caption(i).encode()) > TXT_BYTES
        # (cut, missing) per field: txt, json, __key__.
        assert counts == [(cut_count, missing_count), (0, 0), (0, 0)]
    assert sorted(seen) == sorted(expected)  # every key once


def test_captions_arrive_with_their_images_exactly_once(daemon, shards):
    _, expected = shards
    batches = epoch(daemon.endpoint, "captions")
    assert len(batches) == (len(expected) + BATCH - 1) // BATCH
    check_epoch(batches, expected)
    # Some captions were cut inside a multi-byte character.
    assert any(len(caption(i).encode()) > TXT_BYTES and has_txt(i) and
               len(cut(caption(i), TXT_BYTES).encode()) < TXT_BYTES
               for i in expected.values())
    # The fields change nothing of the pixels: an image-only plan gets the
    # same images, batch by batch.
    with batchd.Loader(daemon.endpoint, "captions", BATCH, size=SIZE, seed=3,
                       rank=0, world_size=1, shared_memory=False) as loader:
        loader.set_epoch(1)
        images_only = [(fnv1a64(images.numpy().tobytes()), labels.tolist())
                       for images, labels in loader]
    assert [b[0] for b in batches] == [b[0] for b in images_only]
    # Shards without cls: labels are -1 unless taken from json.
    assert all(label == -1 for _, labels in images_only for label in labels)


def test_shared_memory_carries_the_fields(daemon, shards):
    _, expected = shards
    over_bytes = epoch(daemon.endpoint, "captions")
    over_ring = epoch(daemon.unix_endpoint, "captions", shared_memory=True)
    assert over_ring == over_bytes
    check_epoch(over_ring, expected)


def test_one_field_yields_images_and_texts(daemon, shards):
    _, expected = shards
    with batchd.Loader(daemon.endpoint, "captions", BATCH, size=SIZE, seed=3,
                       rank=0, world_size=1, fields=["txt"],
                       shuffle=False) as loader:
        images, texts = next(iter(loader))
    assert images.shape[0] == len(texts) == BATCH
    by_index = sorted(expected.values())
    for i, text in zip(by_index, texts):
        assert text == (caption(i) if has_txt(i) else "")


def test_missing_fields_substitute(daemon, shards):
    _, expected = shards
    with batchd.Loader(daemon.endpoint, "captions", BATCH, size=SIZE, seed=3,
                       rank=0, world_size=1, fields=["txt", "__key__"],
                       missing_fields="substitute",
                       batch_format="dict") as loader:
        loader.set_epoch(0)
        for batch in loader:
            assert loader.field_counts[0][1] == 0  # nothing missing
            for text, key in zip(batch["txt"], batch["__key__"]):
                i = expected[key]
                assert has_txt(i)
                assert text == caption(i)


def test_bad_fields_are_refused_by_name(daemon):
    for fields, named in ((["TXT"], "fields[0] 'TXT'"),
                          (["txt", "txt"], "fields[1] 'txt' is named twice"),
                          ({"txt": 2 << 20}, "fields[0] 'txt': max_bytes"),
                          ([f"f{i}" for i in range(9)], "at most 8")):
        with pytest.raises(InvalidArgumentError, match=named.replace(
                "[", r"\[").replace("]", r"\]")):
            batchd.Loader(daemon.endpoint, "captions", BATCH, size=SIZE,
                          fields=fields, rank=0, world_size=1)


def test_s3_shards_give_the_same_fields(binaries, shards, tmp_path):
    from batchd_testing.object_servers import S3Server, ACCESS_KEY, SECRET_KEY
    directory, expected = shards
    build = pathlib.Path(binaries["daemon"]).parents[1]
    with S3Server(build, tmp_path / "s3", ["datasets"]) as s3:
        for shard in sorted(directory.iterdir()):
            s3.put_file("datasets", f"captions/{shard.name}", shard)
        credentials = tmp_path / "credentials"
        credentials.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\n"
                               f"aws_secret_access_key = {SECRET_KEY}\n")
        config = tmp_path / "batchd.conf"
        config.write_text(
            'datasets { name: "s3" path: "s3://datasets/captions/" '
            f'format: TAR_SHARDS endpoint: "{s3.endpoint}" '
            f'credentials_file: "{credentials}" }}\n')
        daemon = Daemon(binaries["daemon"], {"local": directory},
                        ["--workers", "2", "--config", config,
                         "--cache-dir", tmp_path / "cache",
                         "--cache-bytes", 1 << 30],
                        directory=tmp_path / "daemon")
        try:
            local = epoch(daemon.endpoint, "local")
            remote = epoch(daemon.endpoint, "s3")
        finally:
            daemon.stop()
    assert remote == local
    check_epoch(remote, expected)


def test_http_shards_give_the_same_fields(binaries, shards, tmp_path):
    from batchd_testing.object_servers import NginxServer
    directory, expected = shards
    names = sorted(p.name for p in directory.iterdir())
    with NginxServer(directory, tmp_path / "nginx") as nginx:
        config = tmp_path / "batchd.conf"
        config.write_text(
            'datasets { name: "http" format: TAR_SHARDS '
            + "".join(f'shards: "{nginx.url}/{name}" ' for name in names)
            + "}\n")
        daemon = Daemon(binaries["daemon"], {"local": directory},
                        ["--workers", "2", "--config", config,
                         "--cache-dir", tmp_path / "cache",
                         "--cache-bytes", 1 << 30],
                        directory=tmp_path / "daemon")
        try:
            local = epoch(daemon.endpoint, "local")
            remote = epoch(daemon.endpoint, "http")
        finally:
            daemon.stop()
    assert remote == local
    check_epoch(remote, expected)
