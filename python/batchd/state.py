"""Checkpoint state of batchd.Loader: the format's version, the sampler's
batch arithmetic in Python, and merge_states for a job's ranks.

A state (Loader.state_dict()) is a dict; version 2 adds to version 1 the
epoch's global position (elastic resume), and version 1 states still load.
"""
import collections

# 2 adds epoch_start, position and samples; 1 still loads.
STATE_VERSION = 2


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
    shuffle_window_shards, samples) with `batch_size` per rank on
    `world_size` ranks resumes from `state`, a ``Loader.state_dict()`` of
    any world size. `position` is the epoch's global position, or
    ``samples`` when nothing of the epoch is left for this world.

    Raises ValueError when `state` is from another plan or out of range.
    """
    samples = plan["samples"]
    version = state.get("version")
    if version not in (1, STATE_VERSION):
        raise ValueError(f"unknown batchd state version {version!r}")
    for key, value in plan.items():
        # Version 1 states hold neither shuffle nor samples, older
        # version 2 states no shuffle_window_shards.
        if key in state and state[key] != value:
            raise ValueError(f"state_dict is for {key}={state[key]!r}, "
                             f"this loader has {key}={value!r}")
    old_world, old_batch = int(state["world_size"]), int(state["batch_size"])
    if (old_batch != batch_size and
            old_batch * old_world != batch_size * world_size):
        raise ValueError(
            f"state_dict is for batch_size={old_batch} on {old_world} "
            f"ranks (global batch {old_batch * old_world}); this loader "
            f"has batch_size={batch_size} on {world_size} (global "
            f"{batch_size * world_size}): keep the batch size or the global "
            f"batch size")
    epoch = int(state["epoch"])
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, not {epoch}")
    start = int(state.get("epoch_start", 0))
    if not 0 <= start < samples:
        raise ValueError(f"epoch_start {start} is outside 0..{samples - 1}")
    batches = batches_in_rest(samples - start, old_world, old_batch,
                              bool(state.get("drop_last", drop_last)))
    next_batch = int(state["next_batch"])
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
    """
    states = list(states)
    if not states:
        raise ValueError("merge_states needs at least one rank's state")
    keys = ("version", "epoch", "epoch_start", "position", "samples",
            "dataset",
            "batch_size", "seed", "shuffle", "shuffle_window_shards",
            "drop_last", "world_size")
    first = states[0]
    for key in keys:
        values = collections.defaultdict(list)
        for state in states:
            values[state.get(key)].append(state.get("rank"))
        if len(values) > 1:
            detail = "; ".join(f"ranks {sorted(ranks)} have {value!r}"
                               for value, ranks in values.items())
            raise ValueError(f"the ranks' states disagree on {key}: {detail}")
    ranks = sorted(state.get("rank") for state in states)
    if ranks != list(range(first["world_size"])):
        raise ValueError(f"merge_states needs one state from each of the "
                         f"{first['world_size']} ranks, got ranks {ranks}")
    return dict(first, rank=None)
