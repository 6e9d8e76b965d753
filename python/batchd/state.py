"""Checkpoint state of batchd.Loader: the format's version, the check of
a state's fields, the sampler's batch arithmetic in Python, and
merge_states for a job's ranks.

A state (Loader.state_dict()) is a dict; version 2 adds to version 1 the
epoch's global position (elastic resume), and version 1 states still load.
A checkpoint is data from disk: check_state refuses any field of the wrong
type or out of range with a TypeError or ValueError naming it, before
anything reads it.
"""
import collections
import collections.abc
import numbers

# 2 adds epoch_start, position, samples, shuffle and drop_last; 1 still
# loads.
STATE_VERSION = 2

UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
# Repeats a plan may ask for (batchd.v1.Plan.repeats; common::kMaxRepeats).
MAX_REPEATS = 16
# Epochs the daemon serves: 0..2^32-1 (client/loader.h, StartEpoch).
MAX_EPOCH = UINT32_MAX

# The keys a state of each version must have. A version 2 state written
# before shuffle_window_shards existed has none; batches_per_epoch is
# informational (checked when present, never read).
_REQUIRED = {
    1: ("epoch", "next_batch", "dataset", "batch_size", "seed", "rank",
        "world_size"),
    2: ("epoch", "next_batch", "epoch_start", "position", "samples",
        "dataset", "batch_size", "seed", "shuffle", "drop_last", "rank",
        "world_size"),
}


def _int(state, key, low, high, allowed=None):
    """state[key] as an int in low..high (an int or a numpy integer, not a
    bool or a float); TypeError or ValueError naming `key` otherwise."""
    value = state[key]
    allowed = allowed or f"{low}..{high}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"state_dict {key} must be an int ({allowed}), not "
                        f"{type(value).__name__} {value!r}")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"state_dict {key} {value} is outside {allowed}")
    return value


def check_epoch(epoch):
    """`epoch` as an int in 0..2^32-1, the epochs the daemon serves;
    TypeError or ValueError otherwise (as Loader.set_epoch raises)."""
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
        raise TypeError(f"epoch must be an int (0..{MAX_EPOCH}), not "
                        f"{type(epoch).__name__} {epoch!r}")
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch {epoch} is outside 0..{MAX_EPOCH} (2^32-1)")
    return int(epoch)


def _bool(state, key):
    value = state[key]
    if not isinstance(value, bool):
        raise TypeError(f"state_dict {key} must be True or False, not "
                        f"{type(value).__name__} {value!r}")
    return value


def check_state(state):
    """The fields of `state` (a ``Loader.state_dict()``, or the merge of a
    job's from :func:`merge_states`) checked and normalised: a new dict of
    the known keys, ints as int. What each field may be:

    - version: 1 or 2; every key that version writes must be there
    - epoch: 0..2^32-1, the epochs the daemon serves
    - next_batch, epoch_start, position, batches_per_epoch: ints >= 0
      (epoch_start below samples, position at most samples; next_batch is
      checked against the epoch's batches by :func:`resume_point`)
    - samples, batch_size, world_size: ints >= 1 (batch_size and
      world_size at most 2^32-1)
    - rank: 0..world_size-1, or None (a merged state)
    - seed: 0..2^64-1; shuffle_window_shards: 0..2^32-1; repeats: 0..16
    - shuffle, drop_last: bool; dataset: str ("" for a mixture)
    - sources (a mixture's): [[dataset, weight, cursor]], 1..64 entries,
      each dataset a non-empty str named once, weight finite and > 0,
      cursor 0..2^62 (the source's cursor at the start of ``epoch``)

    Raises TypeError (not a dict; a field of the wrong type) or ValueError
    (unknown version, missing keys, a field out of range), naming the
    field and what is allowed.
    """
    if not isinstance(state, collections.abc.Mapping):
        raise TypeError(f"a batchd state must be a dict (a "
                        f"Loader.state_dict()), not {type(state).__name__}")
    if "version" not in state:
        raise ValueError("state_dict has no version: it is not a "
                         "batchd Loader.state_dict()")
    version = state["version"]
    if (isinstance(version, bool) or not isinstance(version, int) or
            version not in _REQUIRED):
        raise ValueError(f"unknown batchd state version {version!r}; this "
                         f"batchd reads versions "
                         f"{', '.join(map(str, _REQUIRED))}")
    missing = [key for key in _REQUIRED[version] if key not in state]
    if missing:
        raise ValueError(f"state_dict (version {version}) is missing "
                         f"{', '.join(missing)}")
    out = {"version": version}
    out["epoch"] = _int(state, "epoch", 0, MAX_EPOCH,
                        f"0..{MAX_EPOCH} (2^32-1)")
    out["next_batch"] = _int(state, "next_batch", 0, UINT64_MAX, ">= 0")
    if not isinstance(state["dataset"], str):
        raise TypeError(f"state_dict dataset must be a str, not "
                        f"{type(state['dataset']).__name__} "
                        f"{state['dataset']!r}")
    out["dataset"] = state["dataset"]
    out["batch_size"] = _int(state, "batch_size", 1, UINT32_MAX)
    out["seed"] = _int(state, "seed", 0, UINT64_MAX, "0..2^64-1")
    out["world_size"] = _int(state, "world_size", 1, UINT32_MAX)
    world = out["world_size"]
    out["rank"] = None if state["rank"] is None else _int(
        state, "rank", 0, world - 1,
        f"0..{world - 1} for world_size {world}, or None for a merged state")
    if "samples" in state:
        out["samples"] = _int(state, "samples", 1, UINT64_MAX, ">= 1")
    samples = out.get("samples")
    if "epoch_start" in state:
        out["epoch_start"] = _int(
            state, "epoch_start", 0, UINT64_MAX if samples is None
            else samples - 1)
    if "position" in state:
        out["position"] = _int(state, "position", 0, UINT64_MAX
                               if samples is None else samples)
    for key in ("shuffle", "drop_last"):
        if key in state:
            out[key] = _bool(state, key)
    if "shuffle_window_shards" in state:
        out["shuffle_window_shards"] = _int(state, "shuffle_window_shards",
                                            0, UINT32_MAX)
    if "repeats" in state:
        out["repeats"] = _int(state, "repeats", 0, MAX_REPEATS)
    if "sources" in state:
        from .mixture import check_state_sources
        out["sources"] = check_state_sources(state["sources"])
    if "batches_per_epoch" in state:
        out["batches_per_epoch"] = _int(state, "batches_per_epoch", 0,
                                        UINT64_MAX, ">= 0")
    return out


def epoch_length(dataset_samples, repeats):
    """Entries of an epoch's global order (common::EpochLength): the
    dataset's samples, or with repeats > 1 torchvision's RASampler length,
    that rounded down to a multiple of 256 (all of it below 256)."""
    if repeats <= 1 or dataset_samples < 256:
        return dataset_samples
    return dataset_samples // 256 * 256


def batches_in_rest(samples, world_size, batch_size, drop_last):
    """Batches per rank of an epoch (or its rest) of `samples` samples, as
    the sampler cuts them (common/sampler.h)."""
    per_rank = -(-samples // world_size)
    return per_rank // batch_size if drop_last else -(-per_rank // batch_size)


def global_position(samples, start, next_batch, batches, batch_size,
                    world_size):
    """The epoch's position every rank has reached in lockstep after
    `next_batch` of its `batches` batches, from `start`; `samples` once the
    epoch is done (common::GlobalPosition)."""
    if next_batch >= batches:
        return samples
    return start + next_batch * batch_size * world_size


def resume_point(state, plan, batch_size, world_size, drop_last):
    """``(epoch, position, old_world_size)``: where a loader of `plan` (the
    dict of fields that must match: dataset, seed, shuffle,
    shuffle_window_shards, repeats, samples; samples is the epoch's length)
    with `batch_size` per rank on
    `world_size` ranks resumes from `state`, a ``Loader.state_dict()`` of
    any world size. `position` is the epoch's global position, or
    ``samples`` when nothing of the epoch is left for this world.

    Raises TypeError or ValueError (:func:`check_state`) when a field of
    `state` has the wrong type or is out of range, ValueError when `state`
    is from another plan.
    """
    state = check_state(state)
    samples = plan["samples"]
    for key, value in plan.items():
        # Version 1 states hold neither shuffle nor samples, older
        # version 2 states no shuffle_window_shards.
        if key == "sources":
            # A mixture's datasets must match; weights and cursors are the
            # state's (the loader takes them over).
            names = [d for d, _, _ in state.get("sources", [])]
            if names != value:
                raise ValueError(f"state_dict is for sources {names!r}, "
                                 f"this loader has {value!r}")
            continue
        if key in state and state[key] != value:
            raise ValueError(f"state_dict is for {key}={state[key]!r}, "
                             f"this loader has {key}={value!r}")
    old_world, old_batch = state["world_size"], state["batch_size"]
    if (old_batch != batch_size and
            old_batch * old_world != batch_size * world_size):
        raise ValueError(
            f"state_dict is for batch_size={old_batch} on {old_world} "
            f"ranks (global batch {old_batch * old_world}); this loader "
            f"has batch_size={batch_size} on {world_size} (global "
            f"{batch_size * world_size}): keep the batch size or the global "
            f"batch size")
    epoch = state["epoch"]
    start = state.get("epoch_start", 0)
    if not 0 <= start < samples:
        raise ValueError(f"epoch_start {start} is outside 0..{samples - 1}")
    batches = batches_in_rest(samples - start, old_world, old_batch,
                              state.get("drop_last", drop_last))
    next_batch = state["next_batch"]
    if not 0 <= next_batch <= batches:
        raise ValueError(f"next_batch {next_batch} is outside "
                         f"0..{batches}")
    position = global_position(samples, start, next_batch, batches,
                               old_batch, old_world)
    if batches_in_rest(samples - position, world_size, batch_size,
                       drop_last) == 0:
        # Nothing of the epoch is left for this world: iterating it
        # yields nothing, and the loop goes on to the next epoch.
        position = samples
    return epoch, position, old_world


def merge_states(states):
    """One state for the whole job from every rank's ``state_dict()``.

    In lockstep (DDP) every rank has reached the same global position of
    the same epoch; a disagreement means the states were not taken at the
    same step and is a ValueError naming the ranks. Each rank may
    load_state_dict() the merged state on any world size.

    Each state is checked as load_state_dict checks it
    (:func:`check_state`; the error says which state), and must be one
    rank's own (a rank, not None).
    """
    states = list(states)
    if not states:
        raise ValueError("merge_states needs at least one rank's state")
    checked = []
    for i, state in enumerate(states):
        try:
            checked.append(check_state(state))
        except (TypeError, ValueError) as e:
            raise type(e)(f"merge_states: state {i}: {e}") from None
        if checked[-1]["rank"] is None:
            raise ValueError(f"merge_states: state {i} has rank None (a "
                             f"merged state); it needs each rank's own "
                             f"state_dict()")
    states = checked
    keys = ("version", "epoch", "epoch_start", "position", "samples",
            "dataset",
            "batch_size", "seed", "shuffle", "shuffle_window_shards",
            "repeats", "drop_last", "world_size", "sources")
    first = states[0]
    for key in keys:
        values = collections.defaultdict(list)
        for state in states:
            value = state.get(key)
            if isinstance(value, list):  # sources: hashable, compared whole
                value = tuple(map(tuple, value))
            values[value].append(state.get("rank"))
        if len(values) > 1:
            detail = "; ".join(f"ranks {sorted(ranks)} have {value!r}"
                               for value, ranks in values.items())
            raise ValueError(f"the ranks' states disagree on {key}: {detail}")
    ranks = sorted(state.get("rank") for state in states)
    if ranks != list(range(first["world_size"])):
        raise ValueError(f"merge_states needs one state from each of the "
                         f"{first['world_size']} ranks, got ranks {ranks}")
    return dict(first, rank=None)
