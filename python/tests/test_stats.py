"""Stall accounting and the diagnosis from Python: stats() counts what was
iterated, diagnose() names a verdict, each epoch's line is reported."""
import logging
import time

import pytest

import batchd

# The `tiny` dataset of conftest.py: 48 images.
IMAGES = 48
SIZE = 16

TOTALS = ("batches", "images", "bytes", "received_bytes", "waited_s",
          "startup_waited_s", "compute_s", "copy_s", "wall_s")
LAST_STEP = ("last_step_waited_s", "last_step_compute_s", "last_step_copy_s")
FRACTIONS = ("waited_fraction", "steady_waited_fraction", "compute_fraction",
             "copy_fraction")
RATES = ("batches_per_second", "images_per_second", "bytes_per_second",
         "received_bytes_per_second")
DAEMONS = ("rerequested", "hedged", "daemons")
RING_AND_REPORTS = ("prefetch", "prefetch_grows", "reports_sent",
                    "reports_rejected", "transport", "transport_note")


def make(daemon, batch_size=4, **kwargs):
    kwargs.setdefault("report", False)
    return batchd.Loader(daemon.endpoint, "tiny", batch_size, size=SIZE,
                         seed=5, rank=0, world_size=1, **kwargs)


def test_stats_count_what_was_iterated(daemon):
    with make(daemon) as loader:
        stats = loader.stats()
        assert set(stats) == set(TOTALS + LAST_STEP + FRACTIONS + RATES +
                                 DAEMONS + RING_AND_REPORTS)
        assert stats["rerequested"] == 0 and stats["hedged"] == 0
        assert [d["endpoint"] for d in stats["daemons"]] == [daemon.endpoint]
        assert stats["daemons"][0]["state"] == "up"
        assert stats["batches"] == stats["images"] == stats["bytes"] == 0
        batches = images = nbytes = 0
        for epoch in range(2):
            loader.set_epoch(epoch)
            for pixels, labels in loader:
                batches += 1
                images += pixels.shape[0]
                nbytes += pixels.numel()
                assert labels.shape[0] == pixels.shape[0]
        stats = loader.stats()
    assert batches == 2 * IMAGES // 4
    assert stats["batches"] == batches
    assert stats["images"] == images == 2 * IMAGES
    assert stats["bytes"] == nbytes == 2 * IMAGES * 3 * SIZE * SIZE
    assert stats["received_bytes"] >= stats["bytes"]
    for key in TOTALS[3:] + LAST_STEP + RATES:
        assert stats[key] >= 0, key
    for key in FRACTIONS:
        assert 0 <= stats[key] <= 1, key
    assert stats["startup_waited_s"] <= stats["waited_s"]
    # Waiting (inside next()) and compute (between a return and the next
    # call) are disjoint parts of the time since creation.
    assert stats["waited_s"] + stats["compute_s"] <= stats["wall_s"] + 1e-6
    assert stats["waited_fraction"] == pytest.approx(
        stats["waited_s"] / stats["wall_s"])
    assert stats["compute_fraction"] == pytest.approx(
        stats["compute_s"] / stats["wall_s"])
    assert stats["images_per_second"] == pytest.approx(
        stats["images"] / stats["wall_s"])
    assert stats["batches_per_second"] == pytest.approx(
        stats["batches"] / stats["wall_s"])
    assert stats["last_step_waited_s"] <= stats["waited_s"]
    assert stats["last_step_compute_s"] <= stats["compute_s"]


def test_waited_plus_compute_covers_the_iteration(daemon):
    # From one batch's return to the last one's, every moment is either
    # waiting (inside next()) or compute (between next() calls).
    with make(daemon) as loader:
        iterator = iter(loader)
        next(iterator)
        before = loader.stats()
        started = time.monotonic()
        count = 1
        for _ in iterator:
            count += 1
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        after = loader.stats()
    assert count == IMAGES // 4
    covered = (after["waited_s"] - before["waited_s"] +
               after["compute_s"] - before["compute_s"])
    # (Compute is booked when the next call starts, so an interval's
    # compute may begin before its first snapshot: compare totals.)
    assert after["waited_s"] + after["compute_s"] <= after["wall_s"]
    # Generous: only Python bookkeeping around the calls falls outside.
    assert covered >= 0.5 * elapsed
    assert after["compute_s"] - before["compute_s"] >= (count - 1) * 0.02 * 0.9


def test_diagnose_names_a_verdict_and_a_line(daemon):
    with make(daemon) as loader:
        diagnosis = loader.diagnose()  # nothing iterated yet
        assert diagnosis.verdict == "unknown"
        assert diagnosis.line
        for _ in loader:
            pass
        diagnosis = loader.diagnose()
        assert isinstance(diagnosis, batchd.Diagnosis)
        assert diagnosis.verdict in batchd.VERDICTS
        assert diagnosis.verdict != "unknown"
        assert diagnosis.line.startswith(diagnosis.verdict)
        assert str(diagnosis) == diagnosis.line
        assert 0 <= diagnosis.waited_fraction <= 1
        assert 0 <= diagnosis.copy_fraction <= 1
        # The daemon answered its status: its busy fraction is known.
        assert diagnosis.daemon_busy_fraction is not None
        assert 0 <= diagnosis.daemon_busy_fraction <= 1
        assert diagnosis.daemon_workers >= 1
        assert diagnosis.stream_bytes_per_second >= 0
    with pytest.raises(batchd.errors.FailedPreconditionError):
        loader.diagnose()


def test_slow_consumer_is_compute_bound(daemon):
    # A fast daemon, tiny images, a 0.2 s "training step" per batch: the
    # ring is always full when the next batch is asked for.
    lines = []
    with make(daemon, batch_size=6, prefetch=4, report=lines.append) as loader:
        assert len(loader) == 8
        assert loader.epoch_diagnosis == ""
        for _ in loader:
            time.sleep(0.2)
        assert len(lines) == 1
        assert lines[0].startswith("epoch 0: compute-bound"), lines
        assert loader.epoch_diagnosis == lines[0]
        assert loader.diagnose().verdict == "compute-bound"
    assert loader.epoch_diagnosis == lines[0]  # kept after close()


def test_each_epoch_is_logged_by_default(daemon, caplog):
    caplog.set_level(logging.INFO, logger="batchd")
    with make(daemon, report=None) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for _ in loader:
                pass
    lines = [r.getMessage() for r in caplog.records if r.name == "batchd"]
    assert len(lines) == 2, lines
    for epoch, line in enumerate(lines):
        assert line.startswith(f"epoch {epoch}: "), line
        verdict = line.split(": ")[1]
        assert verdict in batchd.VERDICTS, line


def test_report_must_be_callable(daemon):
    with pytest.raises(ValueError):
        make(daemon, report="stderr")
