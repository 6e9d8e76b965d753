"""Fixtures: real batchd daemons over small synthetic datasets.

Binaries come from BATCHD_DAEMON, BATCHD_MAKE_DATASET and BATCHD_CLIENT
(set by ctest), else from build/ under the source tree. Daemons start
through batchd_testing.daemon (testing/python), as the benchmarks' do.
"""
import os
import pathlib
import subprocess
import sys

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get(
    "BATCHD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
# ctest's PYTHONPATH has testing/python; a plain `pytest python/tests` too.
if str(SOURCE_DIR / "testing" / "python") not in sys.path:
    sys.path.insert(0, str(SOURCE_DIR / "testing" / "python"))

from batchd_testing.daemon import Daemon  # noqa: E402


def _binary(env, relative):
    path = os.environ.get(env) or str(SOURCE_DIR / "build" / relative)
    if not os.access(path, os.X_OK):
        pytest.exit(f"{path} is not built (set {env})", returncode=2)
    return path


@pytest.fixture(scope="session")
def binaries():
    return {
        "daemon": _binary("BATCHD_DAEMON", "server/batchd"),
        "make_dataset": _binary("BATCHD_MAKE_DATASET", "tools/make_dataset"),
        "client": _binary("BATCHD_CLIENT", "client/batchd-client"),
    }


@pytest.fixture(scope="session")
def dataset_dir(binaries, tmp_path_factory):
    """48 ImageNet-like JPEGs in 4 classes."""
    out = tmp_path_factory.mktemp("data") / "tiny"
    subprocess.run([binaries["make_dataset"], "--out", str(out), "--images",
                    "48", "--classes", "4", "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def daemon(binaries, dataset_dir, tmp_path_factory):
    """One daemon for the whole session, serving `tiny`."""
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir}, ["--workers", "2"],
               directory=tmp_path_factory.mktemp("daemon"))
    yield d
    d.stop()


@pytest.fixture
def fresh_daemon(binaries, dataset_dir, tmp_path):
    """A daemon of its own, for tests that kill or stop it."""
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir}, ["--workers", "2"],
               directory=tmp_path / "daemon")
    yield d
    d.stop()


@pytest.fixture
def two_daemons(binaries, dataset_dir, tmp_path):
    """Two one-worker daemons serving `tiny`, for tests that kill one."""
    daemons = [Daemon(binaries["daemon"], {"tiny": dataset_dir},
                      ["--workers", "1"], directory=tmp_path / f"d{i}")
               for i in range(2)]
    yield daemons
    for d in daemons:
        d.stop()


def fnv1a64(data):
    """FNV-1a, 64 bits, as batchd-client --dump computes it."""
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def collect(loader, epoch, limit=None):
    """[(fnv of the images, labels)] of one iteration of `epoch`, batch by
    batch, stopping after `limit` batches when given."""
    loader.set_epoch(epoch)
    out = []
    for images, labels in loader:
        out.append((fnv1a64(images.numpy().tobytes()), labels.tolist()))
        if limit is not None and len(out) == limit:
            break
    return out


def python_env():
    """Environment for child Python processes: this one's sys.path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
