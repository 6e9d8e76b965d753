"""The trainer-side step timeline: timeline() tiles the consumer's time
into wait, copy and compute per step; plot_timeline() draws it."""
import sys
import time

import pytest

import batchd

# The `tiny` dataset of conftest.py: 48 images.
IMAGES = 48
BATCH = 4
# A step's compute: long enough that thread hand-offs on a loaded machine
# stay far below 2 % of the epoch.
STEP_S = 0.1


def make(daemon):
    return batchd.Loader(daemon.endpoint, "tiny", BATCH, size=16, seed=5,
                         rank=0, world_size=1, report=False)


def run_epoch(loader, step_s=STEP_S):
    """One epoch with a `step_s` compute per step; returns when the loop
    had the first batch in hand and when its last step's compute ended, as
    it saw them (the call that then finds the epoch over is no step)."""
    loader.set_epoch(0)
    first = last = None
    for _ in loader:
        if first is None:
            first = time.time()
        time.sleep(step_s)
        last = time.time()
    return first, last


def test_timeline_adds_up_to_the_wall_time(daemon):
    with make(daemon) as loader:
        assert loader.timeline()["start_s"] == []
        first, end = run_epoch(loader)
        timeline = loader.timeline()
    steps = IMAGES // BATCH
    assert set(timeline) == set(batchd.timeline.KEYS)
    for key in batchd.timeline.KEYS:
        assert len(timeline[key]) == steps, key
    assert timeline["batch"] == list(range(steps))
    assert timeline["epoch"] == [0] * steps
    lengths = [w + c + k for w, c, k in zip(
        timeline["wait_s"], timeline["copy_s"], timeline["compute_s"])]
    # Consecutive steps tile the time: each lasts until the next begins.
    for i in range(steps - 1):
        gap = timeline["start_s"][i + 1] - timeline["start_s"][i]
        assert lengths[i] == pytest.approx(gap, abs=1e-5)
    for compute in timeline["compute_s"]:
        assert compute >= STEP_S * 0.95
    # From the first batch's return to the last step's end, the steps'
    # parts add up to the wall time the loop measured, within 2 %.
    wall = end - first
    timed = sum(lengths) - timeline["wait_s"][0]
    assert timed == pytest.approx(wall, rel=0.02)
    totals = batchd.timeline.summary(timeline)
    assert totals["steps"] == steps
    assert totals["wall_s"] == pytest.approx(sum(lengths), rel=1e-6)


def test_plot_timeline_writes_a_png(daemon, tmp_path):
    pytest.importorskip("matplotlib")
    with make(daemon) as loader:
        run_epoch(loader, step_s=0.01)
        path = loader.plot_timeline(tmp_path / "timeline.png")
    data = (tmp_path / "timeline.png").read_bytes()
    assert path == tmp_path / "timeline.png"
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000


def test_plot_timeline_without_matplotlib_says_what_to_install(
        daemon, tmp_path, monkeypatch):
    # As if not installed: matplotlib and every submodule an earlier test
    # imported cannot be imported.
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with make(daemon) as loader:
        run_epoch(loader, step_s=0.01)
        with pytest.raises(ImportError, match="python3-matplotlib"):
            loader.plot_timeline(tmp_path / "timeline.png")
    assert not (tmp_path / "timeline.png").exists()
