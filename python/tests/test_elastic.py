"""Elastic resume: a job checkpointed on 4 ranks goes on on 3, then on 2,
and every sample of the epoch arrives exactly once, with the bytes a
single-process run gives it; plus the state's errors and merge_states."""
import hashlib
import json
import subprocess
import sys
import textwrap

import pytest

import batchd
from conftest import python_env

SIZE = 16
SEED = 11
SAMPLES = 48  # conftest's `tiny`

# One rank of a torch.distributed (gloo) job: loads a merged state when
# given one, trains `steps` steps (-1: to the end of the epoch) in lockstep
# (a barrier per step, as DDP's all-reduce), and writes what it saw (sample
# index and pixel hash) and its state_dict. Rank 0 kills `kill_pid` after
# its first step.
RANK_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, signal, sys
    import torch.distributed as dist
    import batchd
    (endpoints, world, rank, init_file, state_in, steps, out_path, kill_pid,
     batch) = sys.argv[1:]
    world, rank, steps, kill_pid = int(world), int(rank), int(steps), \\
        int(kill_pid)
    dist.init_process_group("gloo", init_method="file://" + init_file,
                            rank=rank, world_size=world)
    loader = batchd.Loader(endpoints, "tiny", int(batch), size=%(size)d,
                           seed=%(seed)d, prefetch=2)
    line, epoch = None, 0
    if state_in:
        with open(state_in) as f:
            state = json.load(f)
        line = loader.load_state_dict(state)
        epoch = state["epoch"]
    loader.set_epoch(epoch)
    seen, done = [], 0
    for images, labels in loader:
        rows = images.numpy().reshape(len(loader.sample_indices), -1)
        for index, row in zip(loader.sample_indices, rows):
            seen.append([index, hashlib.sha1(row.tobytes()).hexdigest()])
        done += 1
        if kill_pid and rank == 0 and done == 1:
            os.kill(kill_pid, signal.SIGKILL)
        dist.barrier()
        if done == steps:
            break
    with open(out_path, "w") as f:
        json.dump({"state": loader.state_dict(), "seen": seen, "line": line,
                   "stats": loader.stats()["daemons"]}, f)
    dist.destroy_process_group()
""") % {"size": SIZE, "seed": SEED}


def run_phase(tmp_path, name, endpoints, world, batch, steps, state=None,
              kill_pid=0):
    """Runs `world` ranks to completion; their outputs, by rank."""
    directory = tmp_path / name
    directory.mkdir()
    state_in = ""
    if state is not None:
        state_in = str(directory / "state.json")
        with open(state_in, "w") as f:
            json.dump(state, f)
    children = []
    for rank in range(world):
        env = python_env()
        env.pop("RANK", None)
        env.pop("WORLD_SIZE", None)
        children.append(subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, endpoints, str(world),
             str(rank), str(directory / "init"), state_in, str(steps),
             str(directory / f"rank{rank}.json"), str(kill_pid), str(batch)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    for rank, child in enumerate(children):
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, f"{name} rank {rank}: {err}"
    outputs = []
    for rank in range(world):
        with open(directory / f"rank{rank}.json") as f:
            outputs.append(json.load(f))
    return outputs


def single_process_hashes(endpoint):
    """Sample index -> pixel hash of epoch 0, read by one process (world 1)
    in the epoch's global order."""
    hashes, order = {}, []
    with batchd.Loader(endpoint, "tiny", 4, size=SIZE, seed=SEED, rank=0,
                       world_size=1) as loader:
        loader.set_epoch(0)
        for images, _ in loader:
            rows = images.numpy().reshape(len(loader.sample_indices), -1)
            for index, row in zip(loader.sample_indices, rows):
                hashes[index] = hashlib.sha1(row.tobytes()).hexdigest()
                order.append(index)
    return hashes, order


def test_four_then_three_then_two_ranks_see_every_sample_once(
        daemon, two_daemons, tmp_path):
    reference, order = single_process_hashes(daemon.endpoint)
    assert sorted(order) == list(range(SAMPLES))
    endpoints = ",".join(d.endpoint for d in two_daemons)

    # 4 ranks x 3 samples: one step, 12 samples of the global order.
    first = run_phase(tmp_path, "four", endpoints, world=4, batch=3, steps=1)
    merged = batchd.merge_states(o["state"] for o in first)
    assert merged["position"] == 12 and merged["world_size"] == 4

    # 3 ranks x 3: 12 is no batch boundary of this world, so the stream is
    # reopened with a resume; three steps, one of the daemons killed after
    # the first.
    second = run_phase(tmp_path, "three", endpoints, world=3, batch=3,
                       steps=3, state=merged, kill_pid=two_daemons[1].pid)
    assert all("resuming epoch 0 at sample 12 of 48 on 3 ranks, was 4" ==
               o["line"] for o in second)
    merged = batchd.merge_states(o["state"] for o in second)
    assert merged["position"] == 12 + 27

    # 2 ranks x 3 to the end: 9 samples left, 5 per rank, one of padding.
    third = run_phase(tmp_path, "two", endpoints, world=2, batch=3, steps=-1,
                      state=merged)
    assert all(o["state"]["position"] == SAMPLES for o in third)

    seen = [pair for phase in (first, second, third) for o in phase
            for pair in o["seen"]]
    indices = [index for index, _ in seen]
    # Every sample of the epoch, each once, plus the one sample of padding
    # (the epoch's head, as DistributedSampler pads).
    assert sorted(set(indices)) == list(range(SAMPLES))
    duplicated = [i for i in set(indices) if indices.count(i) > 1]
    assert duplicated == [order[0]] and indices.count(order[0]) == 2
    # The phases before the last deliver no duplicates at all.
    early = [index for phase in (first, second) for o in phase
             for index, _ in o["seen"]]
    assert len(early) == len(set(early)) == 39
    # Byte-identical to the single-process run, sample by sample.
    for index, digest in seen:
        assert digest == reference[index], f"sample {index} differs"


def test_same_world_resume_keeps_the_stream(daemon):
    with batchd.Loader(daemon.endpoint, "tiny", 4, size=SIZE, seed=SEED,
                       rank=1, world_size=2) as loader:
        loader.set_epoch(2)
        for step, _ in enumerate(loader):
            if step == 2:
                break
        state = loader.state_dict()
    assert state["position"] == 3 * 4 * 2 and state["epoch_start"] == 0
    with batchd.Loader(daemon.endpoint, "tiny", 4, size=SIZE, seed=SEED,
                       rank=1, world_size=2) as loader:
        native = loader._native
        line = loader.load_state_dict(state)
        assert line == "resuming epoch 2 at sample 24 of 48 on 2 ranks, was 2"
        assert loader._native is native  # a batch boundary: no new stream
        assert len(loader) == 6


def test_other_world_resume_has_a_shorter_epoch(daemon):
    state = batchd_state(daemon)  # 12 samples consumed
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED,
                       rank=0, world_size=3) as loader:
        native = loader._native
        loader.load_state_dict(state)
        # 12 is a batch boundary of this world too (steps of 6): the same
        # stream, from its batch 2 of 8.
        assert loader._native is native
        assert len(loader) == 8 and sum(1 for _ in loader) == 6
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED,
                       rank=3, world_size=4) as loader:
        loader.load_state_dict(state)
        # No boundary of steps of 8: a resumed stream, whose epoch 0 has
        # 48 - 12 = 36 samples left, 9 per rank, 5 batches.
        assert len(loader) == 5 and sum(1 for _ in loader) == 5
        loader.set_epoch(1)
        assert len(loader) == 6 and sum(1 for _ in loader) == 6


def batchd_state(daemon, **overrides):
    """The state of a world-2 run after 3 batches of epoch 0 on `tiny`."""
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED,
                       rank=0, world_size=2) as loader:
        loader.set_epoch(0)
        for step, _ in enumerate(loader):
            if step == 2:
                break
        state = loader.state_dict()
    state.update(overrides)
    return state


def test_load_state_dict_errors_say_what_is_wrong(daemon):
    state = batchd_state(daemon)
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED + 1,
                       world_size=2, rank=0) as loader:
        with pytest.raises(ValueError, match="seed=11, this loader has "
                                             "seed=12"):
            loader.load_state_dict(state)
    with batchd.Loader(daemon.endpoint, "tiny", 5, size=SIZE, seed=SEED,
                       world_size=3, rank=0) as loader:
        with pytest.raises(ValueError, match="keep the batch size or the "
                                             "global batch size"):
            loader.load_state_dict(state)
        with pytest.raises(ValueError, match="dataset="):
            loader.load_state_dict(dict(state, dataset="other"))
        # Another order: a state of the shard-aware shuffle.
        assert state["shuffle_window_shards"] == 0
        with pytest.raises(ValueError, match="shuffle_window_shards=4, this "
                                             "loader has "
                                             "shuffle_window_shards=0"):
            loader.load_state_dict(dict(state, shuffle_window_shards=4))
        # 48 samples on 3 ranks of 5: 4 batches each.
        with pytest.raises(ValueError, match="next_batch 13 is outside "
                                             "0..4"):
            loader.load_state_dict(dict(state, batch_size=5, world_size=3,
                                        next_batch=13))
        with pytest.raises(ValueError, match="unknown batchd state version"):
            loader.load_state_dict(dict(state, version=7))


def test_version_one_states_still_load(daemon):
    state = batchd_state(daemon)
    old = {key: state[key] for key in
           ("epoch", "next_batch", "dataset", "batch_size", "seed", "rank",
            "world_size", "batches_per_epoch")}
    old["version"] = 1
    with batchd.Loader(daemon.endpoint, "tiny", 2, size=SIZE, seed=SEED,
                       rank=0, world_size=3) as loader:
        assert loader.load_state_dict(old) == (
            "resuming epoch 0 at sample 12 of 48 on 3 ranks, was 2")


def test_merge_states_names_the_ranks_that_disagree(daemon):
    state = batchd_state(daemon)
    states = [dict(state, rank=0), dict(state, rank=1, position=14)]
    with pytest.raises(ValueError, match=r"disagree on position: ranks \[0\] "
                                         r"have 12; ranks \[1\] have 14"):
        batchd.merge_states(states)
    with pytest.raises(ValueError, match=r"one state from each of the 2 "
                                         r"ranks, got ranks \[0\]"):
        batchd.merge_states([dict(state, rank=0)])
    merged = batchd.merge_states([dict(state, rank=0), dict(state, rank=1)])
    assert merged["position"] == 12 and merged["rank"] is None


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_like_torchrun(world, argv):
    """Starts `world` processes of `argv` with the environment torchrun
    gives its workers (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), and
    returns rank 0's output. (Debian's torch 1.13 torchrun fails on Python
    3.11 before it starts a worker.)"""
    port = free_port()
    children = []
    for rank in range(world):
        env = python_env()
        env.update(RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        children.append(subprocess.Popen(
            [sys.executable] + argv, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    outputs = []
    for rank, child in enumerate(children):
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, f"rank {rank}: {err}"
        outputs.append(out)
    return outputs[0]


def test_example_resumes_on_another_world_size(daemon, tmp_path):
    """examples/train_elastic.py as torchrun runs it: 2 ranks for 2 steps, then 3
    ranks to the end of the epoch, every sample trained on exactly once
    (plus the 3-rank world's one sample of padding)."""
    from conftest import SOURCE_DIR
    checkpoint, log = tmp_path / "ckpt.pt", tmp_path / "samples"
    outputs = []
    for world, extra in ((2, ["--max-steps", "2"]), (3, [])):
        outputs.append(run_like_torchrun(
            world, [str(SOURCE_DIR / "examples" / "train_elastic.py"),
                    "--endpoint", daemon.endpoint, "--dataset", "tiny",
                    "--checkpoint", str(checkpoint), "--checkpoint-every",
                    "1", "--batch-size", "4", "--image-size", str(SIZE),
                    "--sample-log", str(log)] + extra))
    assert "stopped at step 2, epoch 0" in outputs[0]
    assert ("step 2: resuming epoch 0 at sample 16 of 48 on 3 ranks, was 2"
            in outputs[1])
    indices = []
    for path in tmp_path.glob("samples.rank*"):
        for line in path.read_text().splitlines():
            indices += json.loads(line)["samples"]
    assert sorted(set(indices)) == list(range(SAMPLES))
    assert len(indices) == SAMPLES + 1  # 32 left over 3 ranks: 1 padded


def test_the_daemon_refuses_a_resume_past_the_end(daemon):
    args = batchd.LoaderArgs(endpoint=daemon.endpoint, dataset="tiny",
                             batch_size=4, size=SIZE, resume_epoch=1,
                             resume_position=SAMPLES)
    with pytest.raises(batchd.errors.InvalidArgumentError,
                       match="resume.position 48 is not below the epoch's "
                             "48 samples; an epoch resumed at its end is "
                             "done: start epoch 1 \\+ 1 at position 0"):
        batchd.NativeLoader(args)
    args = batchd.LoaderArgs(endpoint=daemon.endpoint, dataset="tiny",
                             batch_size=4, size=SIZE, drop_last=True,
                             world_size=2, resume_epoch=0,
                             resume_position=42)
    with pytest.raises(batchd.errors.InvalidArgumentError,
                       match="nothing of that epoch is left to deliver"):
        batchd.NativeLoader(args)
