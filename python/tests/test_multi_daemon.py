"""batchd.Loader over several daemons: the same bytes as one daemon, also
when one of them is killed mid-epoch, and per-daemon stats."""
import pytest

import batchd
from conftest import fnv1a64

SIZE = 16
BATCH = 4  # 48 images: 12 batches per epoch


def read_epoch(endpoint, epoch, kill=None, **kwargs):
    """[(fnv, labels)] of one epoch; `kill()` runs after the third batch."""
    loader = batchd.Loader(endpoint, "tiny", BATCH, size=SIZE, seed=3,
                           rank=0, world_size=1, prefetch=4, **kwargs)
    loader.set_epoch(epoch)
    out = []
    for images, labels in loader:
        out.append((fnv1a64(images.numpy().tobytes()), labels.tolist()))
        if kill is not None and len(out) == 3:
            kill()
    stats = loader.stats()
    loader.close()
    return out, stats


def test_list_of_daemons_gives_the_bytes_of_one(daemon, two_daemons):
    reference, _ = read_epoch(daemon.endpoint, epoch=1)
    # epochs=2: epoch 1 is the last, so served counts exactly its batches.
    records, stats = read_epoch([d.endpoint for d in two_daemons], epoch=1,
                                epochs=2)
    assert records == reference
    assert [d["endpoint"] for d in stats["daemons"]] == [
        d.endpoint for d in two_daemons]
    assert sum(d["served"] for d in stats["daemons"]) == len(reference)
    assert all(d["served"] > 0 for d in stats["daemons"])
    assert all(d["state"] == "up" for d in stats["daemons"])


def test_killed_daemon_loses_no_batch(daemon, two_daemons):
    reference, _ = read_epoch(daemon.endpoint, epoch=2)
    endpoints = ",".join(d.endpoint for d in two_daemons)
    records, stats = read_epoch(endpoints, epoch=2, kill=two_daemons[0].kill)
    assert records == reference
    assert stats["daemons"][0]["state"] != "up"
    assert stats["daemons"][0]["last_error"]


def test_all_daemons_down_raises_unavailable_naming_them(two_daemons):
    loader = batchd.Loader([d.endpoint for d in two_daemons], "tiny", BATCH,
                           size=SIZE, rank=0, world_size=1,
                           unavailable_timeout=1.0)
    iterator = iter(loader)
    next(iterator)
    for d in two_daemons:
        d.kill()
    with pytest.raises(batchd.errors.UnavailableError) as info:
        for _ in iterator:
            pass
    for d in two_daemons:
        assert d.endpoint in info.value.message
    loader.close()


def test_bad_endpoint_list_is_a_value_error():
    with pytest.raises(batchd.errors.InvalidArgumentError) as info:
        batchd.Loader("a:1,,b:2", "tiny", BATCH, rank=0, world_size=1)
    assert "empty entry" in info.value.message


def test_next_epoch_read_ahead_keeps_the_bytes_and_stops_at_the_last(
        daemon, two_daemons):
    reference = [read_epoch(daemon.endpoint, epoch=e)[0] for e in (0, 1)]
    loader = batchd.Loader([d.endpoint for d in two_daemons], "tiny", BATCH,
                           size=SIZE, seed=3, rank=0, world_size=1,
                           prefetch=4, epochs=2)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        got = [(fnv1a64(images.numpy().tobytes()), labels.tolist())
               for images, labels in loader]
        assert got == reference[epoch], f"epoch {epoch}"
    stats = loader.stats()
    loader.close()
    # Epoch 1's first batches were read ahead, once; nothing of epoch 2.
    assert sum(d["served"] for d in stats["daemons"]) == 2 * len(reference[0])
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        batchd.Loader(daemon.endpoint, "tiny", BATCH, size=SIZE, epochs=0)
