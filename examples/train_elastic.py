#!/usr/bin/env python3
"""Distributed training that checkpoints every N steps and resumes on any
number of ranks, with every sample of the epoch seen exactly once.

Run it under torchrun (gloo on CPUs, nccl on GPUs), stop it, and start it
again with another --nproc_per_node: it resumes from the checkpoint.

    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 4 \\
        examples/train_elastic.py --endpoint localhost:7070 --dataset train \\
        --checkpoint /tmp/ckpt.pt --checkpoint-every 10 --max-steps 30
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 3 \\
        examples/train_elastic.py --endpoint localhost:7070 --dataset train \\
        --checkpoint /tmp/ckpt.pt --checkpoint-every 10

Any launcher that sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) works; python/tests/test_elastic.py starts the
processes itself that way.

The checkpoint holds the model, the optimiser and one batchd state for the
whole job (batchd.merge_states over every rank's state_dict()): the epoch
and the global position in its order that the ranks reached together. Each
rank of the new world loads it; batchd.Loader.load_state_dict says in one
line where it resumes. --sample-log writes, per rank, the dataset index of
every sample it trained on, so a run can be checked for exactly-once.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import batchd


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True,
                   help="the daemons: host:port, a comma-separated list, or "
                        "dns:///name:port")
    p.add_argument("--dataset", required=True)
    p.add_argument("--checkpoint", required=True,
                   help="checkpoint file, loaded when it exists")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="steps between checkpoints")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop (after a checkpoint) at this global step; 0: "
                        "run --epochs")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-log", help="append this rank's sample indices "
                                        "to SAMPLE_LOG.rank<N>")
    return p.parse_args(argv)


def small_model(classes=1000):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def save_checkpoint(path, model, optimizer, loader, step):
    """Every rank's loader state, merged and checked, saved by rank 0."""
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, loader.state_dict())
    if dist.get_rank() == 0:
        job_state = batchd.merge_states(states)
        tmp = path + ".tmp"
        torch.save({"model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "batchd": job_state, "step": step}, tmp)
        os.replace(tmp, path)  # a crash never leaves half a checkpoint
    dist.barrier()


def main():
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
                          if cuda else "cpu")
    torch.manual_seed(args.seed)

    loader = batchd.Loader(args.endpoint, args.dataset, args.batch_size,
                           size=args.image_size, seed=args.seed,
                           epochs=args.epochs, device=device,
                           normalize=batchd.IMAGENET_NORMALIZE)
    model = nn.parallel.DistributedDataParallel(
        small_model().to(device), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    step, first_epoch = 0, 0
    if os.path.exists(args.checkpoint):
        checkpoint = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step = checkpoint["step"]
        line = loader.load_state_dict(checkpoint["batchd"])
        first_epoch = checkpoint["batchd"]["epoch"]
        if rank == 0:
            print(f"step {step}: {line}", flush=True)

    log = open(f"{args.sample_log}.rank{rank}", "a") if args.sample_log \
        else None
    for epoch in range(first_epoch, args.epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP's all-reduce keeps the ranks in lockstep
            optimizer.step()
            step += 1
            if log is not None:
                log.write(json.dumps({"epoch": epoch,
                                      "samples": loader.sample_indices}) +
                          "\n")
                log.flush()
            done = args.max_steps and step >= args.max_steps
            if step % args.checkpoint_every == 0 or done:
                save_checkpoint(args.checkpoint, model, optimizer, loader,
                                step)
            if done:
                break
        else:
            continue
        break
    if rank == 0:
        print(f"stopped at step {step}, epoch {loader.epoch}", flush=True)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
