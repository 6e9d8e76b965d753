"""Repeated augmentation (Plan.repeats, torchvision's RASampler): every
(image, repeat) pair of an epoch exactly once across ranks, repeats of one
image on different ranks, each with its own augmentation; through a kill -9
of one of two daemons and an elastic resume on another world size; and one
decode per image with the decoded-image cache."""
import collections
import re

import pytest

import batchd
from batchd_testing.daemon import Daemon
from conftest import fnv1a64

# `tiny` has 48 images: below 256, so an epoch keeps all 48 entries of the
# repeated order, 48 / REPEATS distinct images.
IMAGES = 48
REPEATS = 4


def read_rank(endpoint, rank, world, epoch=1, batches=None, state=None,
              **kwargs):
    """[(sample, repeat, fnv of its pixels)] of `rank`'s epoch (or of its
    first `batches` batches), and the loader's state_dict() after them."""
    loader = batchd.Loader(endpoint, "tiny", batch_size=2, size=32,
                           layout="nhwc", repeats=REPEATS, rank=rank,
                           world_size=world, seed=11, report=False, **kwargs)
    try:
        if state is not None:
            loader.load_state_dict(state)
        else:
            loader.set_epoch(epoch)
        out = []
        for images, _ in loader:
            assert len(loader.sample_repeats) == len(loader.sample_indices)
            for i, (sample, repeat) in enumerate(
                    zip(loader.sample_indices, loader.sample_repeats)):
                out.append((sample, repeat,
                            fnv1a64(images[i].numpy().tobytes())))
            if batches is not None and len(out) >= batches * 2:
                break
        return out, loader.state_dict()
    finally:
        loader.close()


def pairs_of(records):
    return collections.Counter((s, r) for s, r, _ in records)


def test_each_pair_once_over_ranks_with_its_own_augmentation(daemon):
    world = 4
    by_rank = [read_rank(daemon.endpoint, rank, world)[0]
               for rank in range(world)]
    records = [record for rank in by_rank for record in rank]
    pairs = pairs_of(records)
    assert sum(pairs.values()) == IMAGES
    assert set(pairs.values()) == {1}, "a pair delivered twice"
    images = {s for s, _ in pairs}
    assert len(images) == IMAGES // REPEATS
    for image in images:
        assert {r for s, r in pairs if s == image} == set(range(REPEATS))
        ranks = {rank for rank, recs in enumerate(by_rank)
                 for s, _, _ in recs if s == image}
        assert len(ranks) == REPEATS, f"image {image}: repeats on {ranks}"
        hashes = {h for s, _, h in records if s == image}
        assert len(hashes) == REPEATS, (
            f"image {image}: repeats share an augmentation")


def test_a_killed_daemon_keeps_every_pair_once_and_the_bytes(daemon,
                                                             two_daemons):
    endpoints = ",".join(d.endpoint for d in two_daemons)
    world = 2
    reference = sorted(r for rank in range(world)
                       for r in read_rank(daemon.endpoint, rank, world)[0])
    records = []
    for rank in range(world):
        loader = batchd.Loader(endpoints, "tiny", batch_size=2, size=32,
                               layout="nhwc", repeats=REPEATS, rank=rank,
                               world_size=world, seed=11, report=False)
        try:
            loader.set_epoch(1)
            for step, (images, _) in enumerate(loader):
                if rank == 0 and step == 3:
                    two_daemons[0].kill()
                for i, (s, r) in enumerate(zip(loader.sample_indices,
                                               loader.sample_repeats)):
                    records.append((s, r,
                                    fnv1a64(images[i].numpy().tobytes())))
        finally:
            loader.close()
    assert sorted(records) == reference


def test_elastic_resume_on_another_world_size_continues_every_pair(daemon):
    # Four ranks take 2 batches of 2 each (16 of the 48 entries), then three
    # ranks resume from the merged state: the other 32 entries exactly
    # once, plus the new world's padding (33 = 3 x 11: one entry of the
    # epoch's head again).
    taken, states = [], []
    for rank in range(4):
        records, state = read_rank(daemon.endpoint, rank, 4, batches=2)
        taken += records[:4]
        states.append(state)
    merged = batchd.merge_states(states)
    assert merged["position"] == 16 and merged["repeats"] == REPEATS
    rest = []
    for rank in range(3):
        rest += read_rank(daemon.endpoint, rank, 3, state=merged)[0]
    assert len(rest) == 33
    pairs = pairs_of(taken + rest)
    assert len(pairs) == IMAGES, "a pair was lost"
    twice = [pair for pair, n in pairs.items() if n == 2]
    assert sum(pairs.values()) == IMAGES + 1 and len(twice) == 1
    # The padding repeats the epoch's first entry: rank 0's first sample.
    assert twice == [taken[0][:2]]


def test_a_state_of_other_repeats_is_refused(daemon):
    _, state = read_rank(daemon.endpoint, 0, 1, batches=1)
    loader = batchd.Loader(daemon.endpoint, "tiny", batch_size=2, size=32,
                           repeats=2, seed=11, report=False)
    try:
        with pytest.raises(ValueError, match="repeats"):
            loader.load_state_dict(state)
    finally:
        loader.close()


def test_bad_repeats_is_invalid_argument_naming_it(daemon):
    with pytest.raises(batchd.errors.InvalidArgumentError, match="repeats is 17"):
        batchd.Loader(daemon.endpoint, "tiny", batch_size=2, repeats=17,
                      report=False)


def metric(page, name):
    match = re.search(rf"^{name} (\S+)$", page, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_repeats_of_an_image_are_decoded_once(binaries, dataset_dir,
                                              tmp_path):
    with Daemon(binaries["daemon"], {"tiny": dataset_dir},
                ["--workers", "2", "--decoded-cache-bytes", "64000000"],
                directory=tmp_path / "d", metrics=True) as d:
        # epochs=2: epoch 1 is the last, so no batch of a next epoch is
        # read ahead (and decoded) meanwhile.
        records, _ = read_rank(d.endpoint, 0, 1, decoded_max_side=64,
                               epochs=2)
        assert sum(pairs_of(records).values()) == IMAGES
        page = d.metrics()
        decodes = metric(page, "batchd_decoded_cache_misses_total")
        uses = (decodes + metric(page, "batchd_decoded_cache_hits_total") +
                metric(page, "batchd_decoded_cache_coalesced_total"))
        assert decodes == IMAGES // REPEATS
        assert uses == IMAGES
