"""Two processes with world_size=2 get disjoint shards covering the data."""
import json
import subprocess
import sys
import textwrap

from conftest import python_env

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    import batchd
    endpoint, rank, init_file, use_dist = sys.argv[1:5]
    if use_dist == "1":
        # rank and world_size come from torch.distributed.
        dist.init_process_group("gloo", init_method="file://" + init_file,
                                rank=int(rank), world_size=2)
    # else from the RANK and WORLD_SIZE environment variables.
    loader = batchd.Loader(endpoint, "tiny", 5, size=16, seed=5)
    epochs = {}
    for epoch in range(2):
        loader.set_epoch(epoch)
        labels = []
        for images, batch_labels in loader:
            labels.append(batch_labels.tolist())
        epochs[epoch] = labels
    samples = {}
    # The sample indices, straight from the native batches.
    for epoch in range(2):
        native = loader._native
        native.start_epoch(epoch, 0)
        indices = []
        while True:
            batch = native.next()
            if batch is None:
                break
            indices += batch.sample_indices
        samples[epoch] = indices
    print(json.dumps({"rank": loader.rank, "world_size": loader.world_size,
                      "len": len(loader), "samples": samples}))
    if use_dist == "1":
        dist.destroy_process_group()
""")


def run_two(daemon, tmp_path, use_dist):
    children = []
    for rank in range(2):
        env = python_env()
        if use_dist:
            env.pop("RANK", None)
            env.pop("WORLD_SIZE", None)
        else:
            env.update(RANK=str(rank), WORLD_SIZE="2")
        children.append(subprocess.Popen(
            [sys.executable, "-c", SCRIPT, daemon.endpoint, str(rank),
             str(tmp_path / "init"), "1" if use_dist else "0"], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def check(results):
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["len"] == 5 for r in results)
    for epoch in ("0", "1"):
        a = results[0]["samples"][epoch]
        b = results[1]["samples"][epoch]
        assert len(a) == len(b) == 24
        assert not set(a) & set(b)
        assert sorted(a + b) == list(range(48))
    # Different epochs, different orders.
    assert results[0]["samples"]["0"] != results[0]["samples"]["1"]


def test_shards_from_environment(daemon, tmp_path):
    check(run_two(daemon, tmp_path, use_dist=False))


def test_shards_from_torch_distributed(daemon, tmp_path):
    check(run_two(daemon, tmp_path, use_dist=True))
