"""batchd.Loader against a real daemon: bytes, epochs, resume, options."""
import subprocess

import pytest
import torch

import batchd
from conftest import collect, fnv1a64

SIZE = 32
BATCH = 8  # 48 images: 6 batches per epoch


def make(daemon, **kwargs):
    options = dict(size=SIZE, seed=11, rank=0, world_size=1)
    options.update(kwargs)
    return batchd.Loader(daemon.endpoint, "tiny", options.pop("batch_size",
                                                              BATCH), **options)


def test_shapes_dtypes_and_len(daemon):
    with make(daemon) as loader:
        assert len(loader) == 6
        count = 0
        for images, labels in loader:
            count += 1
            assert images.shape == (BATCH, 3, SIZE, SIZE)
            assert images.dtype == torch.uint8
            assert labels.dtype == torch.int64 and labels.shape == (BATCH,)
            assert 0 <= labels.min() and labels.max() < 4
        assert count == 6
    with make(daemon, layout="nhwc", batch_size=10, drop_last=True) as loader:
        assert len(loader) == 4
        images, _ = next(iter(loader))
        assert images.shape == (10, SIZE, SIZE, 3)
    with make(daemon, batch_size=10) as loader:
        sizes = [labels.numel() for _, labels in loader]
        assert sizes == [10, 10, 10, 10, 8]


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_bytes_identical_to_cpp_client(daemon, binaries, tmp_path, layout):
    dump = tmp_path / "dump.txt"
    subprocess.run(
        [binaries["client"], "--endpoint", daemon.endpoint, "--dataset",
         "tiny", "--batch_size", str(BATCH), "--size", str(SIZE), "--seed",
         "11", "--layout", layout, "--epochs", "2", "--dump", str(dump)],
        check=True, stdout=subprocess.DEVNULL)
    expected = []
    for line in dump.read_text().splitlines():
        epoch, index, digest, *samples = line.split()
        expected.append((int(epoch), int(index), int(digest, 16),
                         [int(s) for s in samples]))
    got = []
    with make(daemon, layout=layout) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for index, (images, _) in enumerate(loader):
                got.append((epoch, index, fnv1a64(images.numpy().tobytes())))
    assert got == [e[:3] for e in expected]
    assert len(got) == 12


def test_decoded_max_side_matches_cpp_client_and_changes_pixels(
        daemon, binaries, tmp_path):
    dump = tmp_path / "dump.txt"
    subprocess.run(
        [binaries["client"], "--endpoint", daemon.endpoint, "--dataset",
         "tiny", "--batch_size", str(BATCH), "--size", str(SIZE), "--seed",
         "11", "--layout", "nchw", "--decoded_max_side", "48", "--epochs",
         "1", "--dump", str(dump)],
        check=True, stdout=subprocess.DEVNULL)
    expected = [int(line.split()[2], 16)
                for line in dump.read_text().splitlines()]
    with make(daemon, decoded_max_side=48) as loader:
        capped = [digest for digest, _ in collect(loader, 0)]
    with make(daemon) as loader:
        uncapped = [digest for digest, _ in collect(loader, 0)]
    assert capped == expected and len(capped) == 6
    assert capped != uncapped
    with pytest.raises(batchd.errors.BatchdError, match="decoded_max_side"):
        with make(daemon, decoded_max_side=SIZE - 1) as loader:
            next(iter(loader))


def test_epochs_behave_like_distributed_sampler(daemon):
    with make(daemon) as loader:
        first = collect(loader, 0)
        assert collect(loader, 0) == first  # same epoch, same batches
        loader.set_epoch(0)
        assert [(fnv1a64(x.numpy().tobytes()), y.tolist())
                for x, y in loader] == first  # no set_epoch: repeats
        second = collect(loader, 1)
        assert second != first
        assert sorted(sum((b[1] for b in first), [])) == \
            sorted(sum((b[1] for b in second), []))  # same labels, reshuffled


@pytest.mark.parametrize("epoch,stop", [(0, 0), (0, 1), (0, 3), (0, 5),
                                        (0, 6), (1, 2)])
def test_resume_gives_the_uninterrupted_batches(daemon, epoch, stop):
    with make(daemon) as loader:
        full = collect(loader, epoch)
    with make(daemon) as loader:
        head = collect(loader, epoch, limit=stop) if stop else []
        if stop == 0:
            loader.set_epoch(epoch)
        state = loader.state_dict()
    assert state["epoch"] == epoch and state["next_batch"] == stop
    assert head == full[:stop]
    with make(daemon) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(epoch)  # the usual loop calls it; keeps the position
        tail = [(fnv1a64(x.numpy().tobytes()), y.tolist()) for x, y in resumed]
        assert tail == full[stop:]
        # The next epoch starts at its first batch.
        assert len(collect(resumed, epoch + 1)) == 6


def test_resume_mid_iteration_with_checkpoint_after_each_step(daemon):
    with make(daemon) as loader:
        loader.set_epoch(3)
        states, hashes = [], []
        for images, _ in loader:
            hashes.append(fnv1a64(images.numpy().tobytes()))
            states.append(loader.state_dict())
    for k in (1, 4):
        with make(daemon) as resumed:
            resumed.load_state_dict(states[k - 1])
            assert [fnv1a64(x.numpy().tobytes()) for x, _ in resumed] == \
                hashes[k:]


def test_load_state_dict_rejects_other_plans(daemon):
    with make(daemon) as loader:
        state = loader.state_dict()
    with make(daemon, seed=12) as other:
        with pytest.raises(ValueError, match="seed"):
            other.load_state_dict(state)
    with make(daemon) as loader:
        with pytest.raises(ValueError, match="next_batch"):
            loader.load_state_dict(dict(state, next_batch=7))


def test_normalize_matches_torchvision_formula(daemon):
    mean, std = batchd.IMAGENET_NORMALIZE
    with make(daemon) as raw_loader, \
            make(daemon, normalize=(mean, std)) as norm_loader:
        for (raw, _), (norm, _) in zip(raw_loader, norm_loader):
            assert norm.dtype == torch.float32
            want = (raw.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) \
                / torch.tensor(std).view(1, 3, 1, 1)
            torch.testing.assert_close(norm, want, rtol=1e-5, atol=1e-5)
    with make(daemon, layout="nhwc", dtype=torch.float64) as loader:
        images, _ = next(iter(loader))
        assert images.dtype == torch.float64
        assert 0.0 <= images.min() and images.max() <= 1.0
    with pytest.raises(ValueError):
        make(daemon, normalize=(mean, std), dtype=torch.uint8)


def test_eval_mode_is_deterministic_and_options_are_checked(daemon):
    with make(daemon, mode="eval", shuffle=False) as a, \
            make(daemon, mode="eval", shuffle=False, seed=99) as b:
        assert collect(a, 0) == collect(b, 0)  # no randomness in eval
    with pytest.raises(ValueError, match="mode"):
        make(daemon, mode="bogus")
    with pytest.raises(ValueError, match="layout"):
        make(daemon, layout="chw")
    with pytest.raises(batchd.errors.InvalidArgumentError, match="size"):
        make(daemon, size=0)


def test_rank_and_world_size_default_from_environment(daemon, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with batchd.Loader(daemon.endpoint, "tiny", BATCH, size=SIZE) as loader:
        assert (loader.rank, loader.world_size) == (1, 3)
        assert len(loader) == 2  # 16 samples of 48
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with batchd.Loader(daemon.endpoint, "tiny", BATCH, size=SIZE) as loader:
        assert (loader.rank, loader.world_size) == (0, 1)
    with pytest.raises(ValueError, match="rank"):
        batchd.Loader(daemon.endpoint, "tiny", BATCH, rank=2, world_size=2)
