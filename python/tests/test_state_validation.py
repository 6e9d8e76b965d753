"""Loader.load_state_dict checks every field of a checkpoint's state before
it reads any: a wrong type is a TypeError, a missing key or a value out of
range a ValueError, each naming the field and what it may be, and the
loader is left as it was. merge_states checks each rank's state the same
way."""
import numpy as np
import pytest

import batchd
from batchd.state import check_state

SIZE = 16
SEED = 11
SAMPLES = 48  # conftest's `tiny`


@pytest.fixture(scope="module")
def loader(daemon):
    """A world-2 rank-0 loader of `tiny` in batches of 2; the states below
    are its own after 3 batches of epoch 0 (12 samples consumed)."""
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED,
                       rank=0, world_size=2, prefetch=2) as loader:
        yield loader


@pytest.fixture(scope="module")
def good(loader):
    loader.set_epoch(0)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    state = loader.state_dict()
    assert state["position"] == 12 and state["next_batch"] == 3
    return state


def refused(loader, state, error, match):
    """load_state_dict(state) raises `error` matching `match`, and the
    loader's next iteration is still where it was."""
    before = (loader.epoch, loader._start, loader._position)
    with pytest.raises(error, match=match):
        loader.load_state_dict(state)
    assert (loader.epoch, loader._start, loader._position) == before


def test_a_good_state_loads(loader, good):
    assert loader.load_state_dict(dict(good)) == (
        "resuming epoch 0 at sample 12 of 48 on 2 ranks, was 2")
    # A numpy integer is an int (states gathered through numpy arrays).
    assert loader.load_state_dict(dict(good, epoch=np.int64(3))).startswith(
        "resuming epoch 3 at sample 12")
    # The highest epoch the daemon serves.
    assert loader.load_state_dict(dict(good, epoch=2**32 - 1)).startswith(
        f"resuming epoch {2**32 - 1} ")
    loader.set_epoch(0)


@pytest.mark.parametrize("epoch", [2**32, 2**40, 2**64 - 1, 2**64, 2**100,
                                   -1])
def test_epochs_outside_what_the_daemon_serves(loader, good, epoch):
    # Were accepted up to 2^64-1 (to fail when iterating), 2^64 a pybind
    # TypeError, -1 refused with another message.
    refused(loader, dict(good, epoch=epoch), ValueError,
            rf"epoch {epoch} is outside 0\.\.4294967295 \(2\^32-1\)")


@pytest.mark.parametrize("epoch", [1.9, 1.0, "1", True, None])
def test_an_epoch_that_is_not_an_int(loader, good, epoch):
    # 1.9 became epoch 1.
    refused(loader, dict(good, epoch=epoch), TypeError,
            r"epoch must be an int \(0\.\.4294967295 \(2\^32-1\)\), not "
            + type(epoch).__name__)


def test_world_size_and_batch_size_at_least_one(loader, good):
    # world_size 0 was a ZeroDivisionError.
    refused(loader, dict(good, world_size=0), ValueError,
            r"world_size 0 is outside 1\.\.4294967295")
    # world_size -1 with batch_size -8 (the same global batch) was
    # accepted.
    refused(loader, dict(good, world_size=-1, batch_size=-8), ValueError,
            r"batch_size -8 is outside 1\.\.4294967295")
    refused(loader, dict(good, world_size=-1), ValueError,
            r"world_size -1 is outside 1\.\.4294967295")
    refused(loader, dict(good, batch_size=0), ValueError,
            r"batch_size 0 is outside 1\.\.4294967295")
    refused(loader, dict(good, world_size=2.0), TypeError,
            r"world_size must be an int \(1\.\.4294967295\), not float")
    refused(loader, dict(good, batch_size=2**32), ValueError,
            r"batch_size 4294967296 is outside")


def test_rank_within_the_world_or_none(loader, good):
    refused(loader, dict(good, rank=2), ValueError,
            r"rank 2 is outside 0\.\.1 for world_size 2, or None")
    refused(loader, dict(good, rank=-1), ValueError, r"rank -1 is outside")
    refused(loader, dict(good, rank="0"), TypeError,
            r"rank must be an int .*, not str")
    # A merged state has no rank.
    assert loader.load_state_dict(dict(good, rank=None)).startswith(
        "resuming epoch 0 at sample 12")
    loader.set_epoch(0)


@pytest.mark.parametrize("key", ["epoch", "next_batch", "epoch_start",
                                 "position", "samples", "dataset",
                                 "batch_size", "seed", "shuffle", "drop_last",
                                 "rank", "world_size"])
def test_a_missing_key_is_named(loader, good, key):
    # Was a KeyError (or, for some, silently a default).
    state = dict(good)
    del state[key]
    refused(loader, state, ValueError,
            rf"state_dict \(version 2\) is missing {key}$")


def test_missing_keys_are_all_named(loader, good):
    state = {"version": 2, "epoch": 0, "dataset": "tiny"}
    refused(loader, state, ValueError,
            r"is missing next_batch, epoch_start, position, samples, "
            r"batch_size, seed, shuffle, drop_last, rank, world_size$")
    refused(loader, {}, ValueError, "state_dict has no version")


@pytest.mark.parametrize("state", [None, [("epoch", 0)], "state", 3])
def test_a_state_that_is_not_a_dict(loader, state):
    # Was an AttributeError.
    refused(loader, state, TypeError,
            rf"a batchd state must be a dict \(a Loader.state_dict\(\)\), "
            rf"not {type(state).__name__}")


@pytest.mark.parametrize("key", ["drop_last", "shuffle"])
@pytest.mark.parametrize("value", ["no", 1, 0, None, np.bool_(True)])
def test_flags_must_be_bools(loader, good, key, value):
    # drop_last="no" read as True.
    refused(loader, dict(good, **{key: value}), TypeError,
            rf"{key} must be True or False, not {type(value).__name__}")


def test_dataset_must_be_a_str(loader, good):
    refused(loader, dict(good, dataset=b"tiny"), TypeError,
            "dataset must be a str, not bytes")
    refused(loader, dict(good, dataset=None), TypeError,
            "dataset must be a str, not NoneType")


@pytest.mark.parametrize("version", [0, 3, "2", 2.0, True, None])
def test_unknown_versions(loader, good, version):
    refused(loader, dict(good, version=version), ValueError,
            rf"unknown batchd state version {version!r}; this batchd reads "
            r"versions 1, 2")


def test_seed_and_window_are_ints_in_range(loader, good):
    # 11.0 == 11 matched the loader's seed.
    refused(loader, dict(good, seed=float(SEED)), TypeError,
            r"seed must be an int \(0\.\.2\^64-1\), not float")
    refused(loader, dict(good, seed=-1), ValueError,
            r"seed -1 is outside 0\.\.2\^64-1")
    refused(loader, dict(good, seed=2**64), ValueError, "seed 18446744073709551616")
    refused(loader, dict(good, shuffle_window_shards=-1), ValueError,
            r"shuffle_window_shards -1 is outside 0\.\.4294967295")
    refused(loader, dict(good, samples=float(SAMPLES)), TypeError,
            "samples must be an int")
    refused(loader, dict(good, samples=0), ValueError,
            r"samples 0 is outside >= 1")


def test_positions_in_range(loader, good):
    refused(loader, dict(good, next_batch=-1), ValueError,
            r"next_batch -1 is outside >= 0")
    refused(loader, dict(good, next_batch=3.0), TypeError,
            "next_batch must be an int")
    # 48 samples on 2 ranks of 2: 12 batches each.
    refused(loader, dict(good, next_batch=13), ValueError,
            r"next_batch 13 is outside 0\.\.12")
    refused(loader, dict(good, epoch_start=SAMPLES), ValueError,
            r"epoch_start 48 is outside 0\.\.47")
    refused(loader, dict(good, epoch_start=-4), ValueError,
            r"epoch_start -4 is outside 0\.\.47")
    refused(loader, dict(good, position=SAMPLES + 1), ValueError,
            r"position 49 is outside 0\.\.48")
    refused(loader, dict(good, position="12"), TypeError,
            "position must be an int")
    refused(loader, dict(good, batches_per_epoch=-1), ValueError,
            "batches_per_epoch -1 is outside >= 0")


def test_version_one_states_need_only_their_keys(loader, good):
    old = {key: good[key] for key in
           ("epoch", "next_batch", "dataset", "batch_size", "seed", "rank",
            "world_size", "batches_per_epoch")}
    old["version"] = 1
    assert loader.load_state_dict(old).startswith(
        "resuming epoch 0 at sample 12")
    loader.set_epoch(0)
    del old["seed"]
    refused(loader, old, ValueError,
            r"state_dict \(version 1\) is missing seed$")


def test_set_epoch_takes_the_same_epochs(loader):
    for epoch, error in ((2**32, ValueError), (-1, ValueError),
                         (1.5, TypeError), ("2", TypeError)):
        with pytest.raises(error, match="epoch"):
            loader.set_epoch(epoch)
    assert loader.epoch == 0


def test_check_state_normalises(good):
    checked = check_state(dict(good, epoch=np.int32(2), extra="ignored"))
    assert checked["epoch"] == 2 and type(checked["epoch"]) is int
    assert "extra" not in checked
    assert checked == dict(good, epoch=2)


def test_merge_states_checks_each_state(good):
    states = [dict(good, rank=0), dict(good, rank=1)]
    assert batchd.merge_states(states) == dict(good, rank=None)
    with pytest.raises(TypeError, match=r"merge_states: state 1: state_dict "
                                        r"epoch must be an int"):
        batchd.merge_states([states[0], dict(states[1], epoch=0.0)])
    with pytest.raises(ValueError, match=r"merge_states: state 0: state_dict "
                                         r"world_size 0 is outside"):
        batchd.merge_states([dict(states[0], world_size=0), states[1]])
    with pytest.raises(TypeError, match=r"merge_states: state 0: a batchd "
                                        r"state must be a dict"):
        batchd.merge_states([None, states[1]])
    # A merged state is not one rank's.
    merged = batchd.merge_states(states)
    with pytest.raises(ValueError, match=r"state 0 has rank None \(a merged "
                                         r"state\)"):
        batchd.merge_states([merged, states[1]])
    # True == 1 no longer passes for a rank or a flag.
    with pytest.raises(TypeError, match="state 1: state_dict rank must be"):
        batchd.merge_states([states[0], dict(states[1], rank=True)])
