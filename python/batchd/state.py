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
