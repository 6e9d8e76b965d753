"""batchd.Loader over same-host shared memory: the daemon's workers write
straight into the loader's ring. Bytes, resume, set_epoch and two
processes with world_size 2 match the bytes path exactly."""
import json
import subprocess
import sys
import textwrap

import pytest

import batchd
from batchd_testing.daemon import Daemon
from conftest import collect, fnv1a64, python_env

SIZE = 32
BATCH = 8  # 48 images: 6 batches per epoch


def make(endpoint, **kwargs):
    options = dict(size=SIZE, seed=13, rank=0, world_size=1)
    options.update(kwargs)
    return batchd.Loader(endpoint, "tiny", BATCH, **options)


@pytest.fixture
def unix_daemon(binaries, dataset_dir, tmp_path):
    socket = tmp_path / "b.sock"
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir},
               ["--workers", "2", "--unix-socket", str(socket)],
               directory=tmp_path / "d")
    d.unix_endpoint = f"unix:{socket}"
    yield d
    d.stop()


def test_unix_and_loopback_use_shared_memory_with_the_same_bytes(unix_daemon):
    with make(unix_daemon.endpoint, shared_memory=False) as loader:
        reference = [collect(loader, e) for e in range(2)]
        assert loader.stats()["transport"] == "tcp"
    for endpoint in (unix_daemon.unix_endpoint, unix_daemon.endpoint):
        with make(endpoint) as loader:
            got = [collect(loader, e) for e in range(2)]
            stats = loader.stats()
        assert stats["transport"] == "shared-memory", stats["transport_note"]
        assert stats["daemons"][0]["transport"] == "shared-memory"
        assert stats["copy_s"] == 0
        assert got == reference
    # set_epoch changes the order over shared memory as over bytes.
    assert reference[0] != reference[1]


@pytest.mark.parametrize("stop", [0, 2, 5])
def test_resume_over_shared_memory(unix_daemon, stop):
    with make(unix_daemon.unix_endpoint, shared_memory=False) as loader:
        full = collect(loader, 1)
    with make(unix_daemon.unix_endpoint) as loader:
        head = collect(loader, 1, limit=stop) if stop else []
        if stop == 0:
            loader.set_epoch(1)
        state = loader.state_dict()
    with make(unix_daemon.unix_endpoint) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(1)
        tail = [(fnv1a64(x.numpy().tobytes()), y.tolist()) for x, y in resumed]
        assert resumed.stats()["transport"] == "shared-memory"
    assert head + tail == full


def test_tensors_from_slots_stay_valid_while_held(unix_daemon):
    # A held tensor keeps its slot out of the daemon's hands: its bytes do
    # not change while later batches are written into other slots.
    with make(unix_daemon.unix_endpoint, prefetch=3) as loader:
        loader.set_epoch(0)
        it = iter(loader)
        first, _ = next(it)
        kept = first.clone()
        rest = sum(1 for _ in it)  # each released before the next
        assert rest == 5
        assert bool((first == kept).all())


SCRIPT = textwrap.dedent("""
    import json, sys
    import batchd
    from conftest import fnv1a64
    endpoint, rank = sys.argv[1], int(sys.argv[2])
    loader = batchd.Loader(endpoint, "tiny", 5, size=16, seed=5, rank=rank,
                           world_size=2)
    out = {}
    for epoch in range(2):
        loader.set_epoch(epoch)
        out[epoch] = [fnv1a64(x.numpy().tobytes()) for x, _ in loader]
    print(json.dumps({"transport": loader.stats()["transport"],
                      "batches": out}))
""")


def test_two_processes_with_world_size_2(unix_daemon):
    children = [subprocess.Popen(
        [sys.executable, "-c", SCRIPT, unix_daemon.unix_endpoint, str(rank)],
        env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for rank in range(2)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for rank, result in enumerate(results):
        assert result["transport"] == "shared-memory"
        with batchd.Loader(unix_daemon.endpoint, "tiny", 5, size=16, seed=5,
                           rank=rank, world_size=2,
                           shared_memory=False) as loader:
            for epoch in range(2):
                loader.set_epoch(epoch)
                expected = [fnv1a64(x.numpy().tobytes()) for x, _ in loader]
                assert result["batches"][str(epoch)] == expected
    assert results[0]["batches"] != results[1]["batches"]
