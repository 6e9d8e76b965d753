"""A small training loop on batchd batches learns an easy task, and the
ResNet example runs and prints well-formed lines."""
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import batchd
from batchd_testing.daemon import Daemon
from conftest import SOURCE_DIR, python_env


@pytest.fixture(scope="module")
def colour_daemon(binaries, tmp_path_factory):
    """40 JPEGs: class 0 reddish, class 1 bluish, with noise."""
    from PIL import Image
    root = tmp_path_factory.mktemp("colours")
    generator = torch.Generator().manual_seed(0)
    for label, (r, b) in enumerate([(200, 40), (40, 200)]):
        (root / f"c{label}").mkdir()
        for i in range(20):
            noise = torch.randint(-40, 40, (48, 64, 3), generator=generator)
            base = torch.tensor([r, 100, b]).view(1, 1, 3)
            pixels = (base + noise).clamp(0, 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / f"c{label}" / f"{i:03d}.jpg",
                                         quality=90)
    daemon = Daemon(binaries["daemon"], {"colours": root},
                    ["--workers", "2"],
                    directory=tmp_path_factory.mktemp("colour-daemon"))
    yield daemon
    daemon.stop()


def test_loss_decreases_on_an_easy_task(colour_daemon):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = batchd.Loader(colour_daemon.endpoint, "colours", 8, size=16,
                           normalize=batchd.IMAGENET_NORMALIZE, rank=0,
                           world_size=1, seed=1)
    epoch_losses = []
    for epoch in range(6):
        loader.set_epoch(epoch)
        losses = []
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        epoch_losses.append(sum(losses) / len(losses))
    loader.close()
    assert epoch_losses[-1] < 0.5 * epoch_losses[0], epoch_losses
    with torch.no_grad():
        eval_loader = batchd.Loader(colour_daemon.endpoint, "colours", 40,
                                    mode="eval", size=16, shuffle=False,
                                    normalize=batchd.IMAGENET_NORMALIZE,
                                    rank=0, world_size=1)
        images, labels = next(iter(eval_loader))
        accuracy = (model(images).argmax(1) == labels).float().mean()
        eval_loader.close()
    assert accuracy >= 0.9


LINE = re.compile(
    r"^(batchd \(prefetch \d+\)|DataLoader \(num_workers \d+, pin_memory "
    r"(True|False)\)): step \d+\.\d ms, \d+\.\d images/s, waiting for data "
    r"\d+\.\d% of wall time, loss \d+\.\d+$")
VERDICT = re.compile(r"^.*: verdict: (input|compute)-bound \(waiting "
                     r"\d+\.\d% vs threshold \d+%\)$")


def test_resnet_example_runs(binaries, dataset_dir, tmp_path):
    build = pathlib.Path(binaries["daemon"]).parents[1]
    out = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "examples" / "train_resnet.py"),
         "--data", str(dataset_dir), "--build", str(build), "--image-size",
         "32", "--batch-size", "8", "--steps", "2", "--warmup", "1",
         "--daemon-workers", "1"],
        env=python_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("ResNet-18 on cpu, 32x32, batch 8")
    assert len(lines) == 5, out.stdout
    for i in (1, 3):
        assert LINE.match(lines[i]), lines[i]
        assert VERDICT.match(lines[i + 1]), lines[i + 1]
    assert lines[1].startswith("batchd") and lines[3].startswith("DataLoader")


def test_resnet_example_applies_the_reference_recipe(binaries, dataset_dir):
    """--auto-augment and the crop sizes reach both loaders; the evaluation
    pass uses the eval recipe."""
    build = pathlib.Path(binaries["daemon"]).parents[1]
    out = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "examples" / "train_resnet.py"),
         "--data", str(dataset_dir), "--build", str(build), "--batch-size",
         "8", "--steps", "1", "--warmup", "0", "--daemon-workers", "1",
         "--auto-augment", "ta_wide", "--interpolation", "bicubic",
         "--train-crop-size", "40", "--val-resize-size", "40",
         "--val-crop-size", "32", "--eval-steps", "1"],
        env=python_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("ResNet-18 on cpu, 40x40, batch 8")
    assert lines[0].endswith("; bicubic, auto-augment ta_wide")
    evals = [line for line in lines if ": eval (resize 40, crop 32): " in line]
    assert len(evals) == 2, out.stdout
    assert evals[0].startswith("batchd") and evals[1].startswith("DataLoader")


def test_resnet_example_takes_the_full_reference_recipe(binaries,
                                                     dataset_dir):
    """The ResNet-50 recipe's batch-level flags (--random-erase,
    --mixup-alpha, --cutmix-alpha, --label-smoothing, --ra-sampler
    --ra-reps) reach both loaders and train."""
    build = pathlib.Path(binaries["daemon"]).parents[1]
    out = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "examples" / "train_resnet.py"),
         "--data", str(dataset_dir), "--build", str(build), "--image-size",
         "32", "--batch-size", "8", "--steps", "2", "--warmup", "0",
         "--daemon-workers", "1", "--auto-augment", "ta_wide",
         "--random-erase", "0.1", "--mixup-alpha", "0.2", "--cutmix-alpha",
         "1.0", "--label-smoothing", "0.1", "--ra-sampler", "--ra-reps", "4"],
        env=python_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 5, out.stdout
    for i in (1, 3):
        assert LINE.match(lines[i]), lines[i]
    assert lines[1].startswith("batchd") and lines[3].startswith("DataLoader")


CLIP_LINE = re.compile(r"^steps 3, epochs \d+, \d+\.\d pairs/s, loss "
                       r"\d+\.\d{4} -> \d+\.\d{4}$")


def test_clip_example_runs(binaries, tmp_path):
    """examples/train_clip.py: writes img2dataset-style shards, reads
    images with their captions from batchd, and trains a few steps."""
    build = pathlib.Path(binaries["daemon"]).parents[1]
    out = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "examples" / "train_clip.py"),
         "--shards", str(tmp_path / "shards"), "--build", str(build),
         "--images", "48", "--batch-size", "8", "--steps", "3",
         "--daemon-workers", "1"],
        env=python_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "CLIP on cpu, 32x32, batch 8, 3 steps"
    assert CLIP_LINE.match(lines[1]), lines[1]
    assert len(list((tmp_path / "shards").glob("*.tar"))) == 1


def test_simclr_example_runs(binaries, tmp_path):
    """examples/train_simclr.py: two views per image from one decode, the
    NT-Xent loss on a small ResNet-style CNN, a few steps on the CPU."""
    build = pathlib.Path(binaries["daemon"]).parents[1]
    out = subprocess.run(
        [sys.executable, str(SOURCE_DIR / "examples" / "train_simclr.py"),
         "--images", str(tmp_path / "images"), "--build", str(build),
         "--count", "32", "--batch-size", "8", "--steps", "3",
         "--daemon-workers", "1"],
        env=python_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "SimCLR on cpu, 2 views of 32x32, batch 8, 3 steps"
    losses = [float(re.match(r"^step \d: loss (\d+\.\d{4})$", line).group(1))
              for line in lines[1:4]]
    # NT-Xent of 16 views starts near log(15) = 2.7; finite and positive.
    assert all(0 < loss < 10 for loss in losses), losses
    assert re.match(r"^3 steps in \d+\.\d s$", lines[4]), lines[4]
