"""Weighted mixtures (Plan.sources) over real daemons serving two small
datasets: each epoch's per-source counts are the weights' quotas, each
source's passes run without replacement and continue across epochs and
through a weight change at an epoch boundary, two daemons give the same
bytes, and a checkpoint resumed on another world size continues every
source exactly once."""
import collections
import hashlib
import subprocess

import pytest

import batchd
from conftest import fnv1a64
from batchd import mixture

SIZE = 16
SEED = 5
BATCH = 4
EPOCH = 40  # samples_per_epoch
TINY, SMALL = 48, 20  # samples of the two datasets


@pytest.fixture(scope="module")
def small_dir(binaries, tmp_path_factory):
    out = tmp_path_factory.mktemp("mix") / "small"
    subprocess.run([binaries["make_dataset"], "--out", str(out), "--images",
                    str(SMALL), "--classes", "2", "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="module")
def mix_daemons(binaries, dataset_dir, small_dir, tmp_path_factory):
    from batchd_testing.daemon import Daemon
    daemons = [Daemon(binaries["daemon"],
                      {"tiny": dataset_dir, "small": small_dir},
                      ["--workers", "2"],
                      directory=tmp_path_factory.mktemp(f"mixd{i}"))
               for i in range(2)]
    yield daemons
    for d in daemons:
        d.stop()


def make_loader(endpoint, weights=(0.25, 0.75), **kwargs):
    options = dict(size=SIZE, seed=SEED, prefetch=2, rank=0, world_size=1,
                   samples_per_epoch=EPOCH)
    options.update(kwargs)
    return batchd.Loader(endpoint, sources=[("tiny", weights[0]),
                                            ("small", weights[1])],
                         batch_size=options.pop("batch_size", BATCH),
                         **options)


def read(loader, epoch=None, limit=None):
    """[(source, index, pixel hash)] of one iteration, sample by sample."""
    if epoch is not None:
        loader.set_epoch(epoch)
    out, batches = [], 0
    for images, _ in loader:
        rows = images.numpy().reshape(len(loader.sample_indices), -1)
        for source, index, row in zip(loader.sample_sources,
                                      loader.sample_indices, rows):
            out.append((source, index,
                        hashlib.sha1(row.tobytes()).hexdigest()))
        batches += 1
        if batches == limit:
            break
    return out


def streams(epochs):
    """Each source's samples over `epochs` (lists of read() records), in
    order: the source's stream of passes."""
    out = collections.defaultdict(list)
    for records in epochs:
        for source, index, _ in records:
            out[source].append(index)
    return out


def assert_passes_without_replacement(stream, size):
    for begin in range(0, len(stream) - size + 1, size):
        assert sorted(stream[begin:begin + size]) == list(range(size))
    tail = stream[len(stream) // size * size:]
    assert len(set(tail)) == len(tail)


def test_quotas_passes_and_two_daemons(mix_daemons):
    a = make_loader(mix_daemons[0].endpoint)
    b = make_loader(mix_daemons[1].endpoint)
    epochs = [read(a, e) for e in range(3)]
    assert [read(b, e) for e in range(3)] == epochs  # byte-identical
    assert mixture.quotas([0.25, 0.75], EPOCH) == [10, 30]
    for records in epochs:
        counts = collections.Counter(source for source, _, _ in records)
        assert counts == {"tiny": 10, "small": 30}
    s = streams(epochs)
    # small (20 samples) is upsampled 1.5x: 90 samples, 4.5 passes, each
    # a permutation; tiny (48) subsampled: 30 distinct samples of a pass
    # that continues across the epochs.
    assert_passes_without_replacement(s["small"], SMALL)
    assert_passes_without_replacement(s["tiny"], TINY)
    assert len(set(s["tiny"])) == 30
    # Upsampled repeats draw their own augmentation.
    pixels = collections.defaultdict(set)
    for source, index, digest in epochs[0]:
        pixels[(source, index)].add(digest)
    assert any(len(d) > 1 for d in pixels.values())
    a.close()
    b.close()


def test_weight_change_at_an_epoch_boundary(mix_daemons):
    loader = make_loader(mix_daemons[0].endpoint)
    first = read(loader, 0)
    loader.set_weights({"tiny": 0.75, "small": 0.25})
    second = read(loader, 1)
    loader.set_epoch(2)
    third = read(loader)
    for records, want in ((first, {"tiny": 10, "small": 30}),
                          (second, {"tiny": 30, "small": 10}),
                          (third, {"tiny": 30, "small": 10})):
        assert collections.Counter(s for s, _, _ in records) == want
    s = streams([first, second, third])
    assert_passes_without_replacement(s["small"], SMALL)
    assert_passes_without_replacement(s["tiny"], TINY)
    # The state holds where each source stood at the start of its epoch
    # (2), with the position (the whole epoch, done).
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (2, EPOCH)
    assert state["sources"] == [["tiny", 0.75, 10 + 30],
                                ["small", 0.25, 30 + 10]]
    with pytest.raises(ValueError, match="not yet started"):
        loader.set_weights([0.5, 0.5], epoch=1)
    loader.close()


def test_resume_on_another_world_size_continues_every_source(mix_daemons):
    endpoints = ",".join(d.endpoint for d in mix_daemons)
    # The uninterrupted run: epoch 0 at the first weights, epoch 1 at new.
    reference = make_loader(endpoints)
    read(reference, 0)
    reference.set_weights([0.75, 0.25])
    want = read(reference, 1)
    reference.close()
    # Two ranks run epoch 0, change the weights, take 3 batches of epoch 1
    # in lockstep and checkpoint.
    ranks = [make_loader(endpoints, rank=r, world_size=2) for r in range(2)]
    got = []
    for loader in ranks:
        read(loader, 0)
        loader.set_weights([0.75, 0.25])
        got += read(loader, 1, limit=3)
    state = batchd.merge_states([loader.state_dict() for loader in ranks])
    for loader in ranks:
        loader.close()
    assert state["position"] == 3 * BATCH * 2
    # Three ranks resume it, made with the first weights: the state's
    # cursors and weights take over.
    rest = []
    for r in range(3):
        loader = make_loader(endpoints, rank=r, world_size=3)
        loader.load_state_dict(state)
        assert loader.sources[0].weight == 0.75
        rest += read(loader)
        loader.close()
    # The new world pads its part to a multiple of 3 with the epoch's head.
    left = EPOCH - state["position"]
    padding = -(-left // 3) * 3 - left
    assert padding == 2
    assert len(rest) == left + padding
    combined = collections.Counter(got + rest)
    combined.subtract(collections.Counter(want[:padding]))
    assert +combined == collections.Counter(want)


def test_bad_sources_are_refused(mix_daemons):
    endpoint = mix_daemons[0].endpoint
    with pytest.raises(ValueError, match="weight"):
        make_loader(endpoint, weights=(0.5, float("nan")))
    with pytest.raises(ValueError, match="not both"):
        batchd.Loader(endpoint, "tiny", BATCH, sources=[("tiny", 1)])
    with pytest.raises(batchd.errors.BatchdError,
                       match=r"sources\[1\].dataset: unknown dataset"):
        batchd.Loader(endpoint, sources=[("tiny", 1), ("nope", 1)],
                      batch_size=BATCH, size=SIZE, rank=0, world_size=1)
    loader = make_loader(endpoint)
    state = loader.state_dict()
    with pytest.raises(TypeError, match=r"sources\[0\] cursor"):
        loader.load_state_dict(dict(state, sources=[["tiny", 0.25, "x"],
                                                    ["small", 0.75, 0]]))
    with pytest.raises(ValueError, match="sources"):
        loader.load_state_dict(dict(state, sources=[["small", 0.25, 0],
                                                    ["tiny", 0.75, 0]]))
    loader.close()


def test_cpp_client_sources_flag_gives_the_loaders_bytes(mix_daemons,
                                                         binaries, tmp_path):
    dump = tmp_path / "dump.txt"
    subprocess.run(
        [binaries["client"], "--endpoint", mix_daemons[0].endpoint,
         "--sources", "tiny:0.25,small:0.75", "--samples_per_epoch",
         str(EPOCH), "--batch_size", str(BATCH), "--size", str(SIZE),
         "--seed", str(SEED), "--layout", "nchw", "--dump", str(dump)],
        check=True, stdout=subprocess.DEVNULL)
    want = []
    for line in dump.read_text().splitlines():
        _, _, digest, *samples = line.split()
        want.append((int(digest, 16),
                     [tuple(map(int, s.split(":"))) for s in samples]))
    loader = make_loader(mix_daemons[0].endpoint)
    loader.set_epoch(0)
    got = []
    names = [s.dataset for s in loader.sources]
    for images, _ in loader:
        got.append((fnv1a64(images.numpy().tobytes()),
                    [(names.index(s), i) for s, i in
                     zip(loader.sample_sources, loader.sample_indices)]))
    loader.close()
    assert got == want
    bad = subprocess.run([binaries["client"], "--endpoint",
                          mix_daemons[0].endpoint, "--sources", "tiny"],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert "is not name:weight" in bad.stderr
