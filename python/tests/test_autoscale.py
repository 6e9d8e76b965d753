"""prefetch="auto" and the trainer's reports, through the Python Loader."""
import time

import pytest
import torch

import batchd
from batchd_testing.daemon import Daemon


def make(endpoint, **kwargs):
    return batchd.Loader(endpoint, "tiny", 4, size=16, seed=5, rank=0,
                         world_size=1, **kwargs)


def test_auto_prefetch_yields_the_same_batches(daemon):
    with make(daemon.endpoint, prefetch=4) as fixed, \
            make(daemon.endpoint, prefetch="auto") as auto:
        for (a, la), (b, lb) in zip(fixed, auto):
            assert torch.equal(a, b)
            assert torch.equal(la, lb)
        stats = auto.stats()
        assert stats["prefetch"] >= 4
        assert stats["prefetch_grows"] >= 0
        assert auto.window == stats["prefetch"]
        # A fixed ring never grows.
        assert fixed.stats()["prefetch"] == 4
        assert fixed.stats()["prefetch_grows"] == 0


def test_bad_prefetch_values_are_clear_errors(daemon):
    for bad in (0, -1, "many"):
        with pytest.raises(ValueError, match="prefetch must be >= 1"):
            make(daemon.endpoint, prefetch=bad)
    with pytest.raises(ValueError, match="prefetch_memory must be a positive"):
        make(daemon.endpoint, prefetch="auto", prefetch_memory=0)


def test_the_loader_reports_to_an_autoscaling_daemon(binaries, dataset_dir,
                                                     tmp_path):
    d = Daemon(binaries["daemon"], {"tiny": dataset_dir},
               ["--workers", "auto", "--max-workers", "2"],
               directory=tmp_path / "d")
    try:
        with make(d.endpoint, job="py") as loader:
            deadline = time.monotonic() + 10
            epoch = 0
            while loader.stats()["reports_sent"] < 2:
                assert time.monotonic() < deadline, loader.stats()
                loader.set_epoch(epoch)
                for _ in loader:
                    time.sleep(0.01)
                epoch += 1
            assert loader.stats()["reports_rejected"] == 0
    finally:
        d.stop()
    assert "workers (auto, 1..2)" in d.log_path.read_text()
