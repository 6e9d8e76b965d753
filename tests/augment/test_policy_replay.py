"""Replays a daemon's augmentation with torchvision: for a fixed seed, the
daemon builds batch 0 of a plan with Pipeline.augment and of the same plan
without it (the same crops: the crop and flip draw from their own
stream), logs each sample's drawn calls (--log-augment-sample, one daemon
per sample), and torchvision.transforms.functional applies those calls to
the un-augmented sample. The daemon's sample must match: bit for bit for
the lookup-table ops and the flip, within the tolerance of the kernels'
parity tests for the rest.

Needs the real kernels (server/augment/color_ops.cc, geometry_ops.cc); the
lookup-table case also passes with the stand-ins.
"""
import ast
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

from batchd_testing.daemon import Daemon
from replay import difference, from_tensor, to_tensor

DAEMON = os.environ.get("BATCHD_DAEMON", "build/server/batchd")
MAKE_DATASET = os.environ.get("BATCHD_MAKE_DATASET", "build/tools/make_dataset")
FETCH = os.environ.get("BATCHD_AUGMENT_FETCH",
                       "build/tests/augment/batchd-augment-fetch")

SIZE = 64
BATCH = 6
SEED = 11

# Exact ops: lookup tables and the flip.
LUT_OPS = """
  augment { random_invert { p: 0.5 } }
  augment { random_posterize { bits: 3 p: 0.5 } }
  augment { random_solarize { threshold: 100 p: 0.5 } }
  augment { random_vertical_flip { p: 0.5 } }
  augment { random_equalize { p: 0.5 } }
  augment { random_autocontrast { p: 0.5 } }
"""

# Every policy and op. Bilinear geometric ops are given a fill: batchd's
# kernels always blend one, as torchvision does only when given one.
ALL_OPS = """
  augment { trivial_augment_wide { } }
  augment { rand_augment { num_ops: 2 magnitude_std: 0.5
                           interpolation: INTERPOLATION_BILINEAR
                           fill: [0, 0, 0] } }
  augment { auto_augment { policy: POLICY_IMAGENET } }
  augment { aug_mix { mixture_width: 2 severity: 3 fill: [10, 20, 30] } }
  augment { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4
                           hue: 0.1 } }
  augment { random_grayscale { p: 0.3 } }
  augment { gaussian_blur { kernel_size: 5 sigma_min: 0.5 sigma_max: 1.5
                            p: 0.5 } }
  augment { random_affine { degrees_min: -15 degrees_max: 15
                            translate_x: 0.1 translate_y: 0.1
                            scale_min: 0.9 scale_max: 1.1
                            shear_x_min: -5 shear_x_max: 5
                            interpolation: INTERPOLATION_BILINEAR
                            fill: [0, 0, 0] } }
  augment { random_rotation { degrees_min: -20 degrees_max: 20 } }
"""

INTERPOLATION = {"nearest": InterpolationMode.NEAREST,
                 "bilinear": InterpolationMode.BILINEAR}


def plan_text(ops):
    return (f'dataset: "d" batch_size: {BATCH} seed: {SEED} shuffle: false '
            f'pipeline {{ train {{ size: {SIZE} }} {ops} }}')


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("dataset")
    subprocess.run([MAKE_DATASET, "--out", str(out), "--images", "12",
                    "--classes", "2", "--seed", "3"], check=True,
                   capture_output=True)
    return out


def fetch(endpoint, plan, directory):
    """Batch 0 of epoch 0 of `plan` (text format): (pixels NxHxWx3,
    sample indices)."""
    plan_file = directory / "plan.txt"
    plan_file.write_text(plan)
    out = directory / "pixels"
    done = subprocess.run([FETCH, endpoint, str(plan_file), "0", "0",
                           str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    shape = [int(w) for w in words[1:words.index("samples")]]
    samples = [int(w) for w in words[words.index("samples") + 1:]]
    pixels = np.fromfile(out, dtype=np.uint8).reshape(shape)
    return pixels, samples


def drawn(dataset, ops, sample, directory):
    """(the augmented batch, its samples, the calls drawn for `sample`)."""
    directory.mkdir(parents=True, exist_ok=True)
    with Daemon(DAEMON, {"d": dataset},
                ["--workers", "1", "--log-augment-sample", str(sample)],
                directory=directory) as daemon:
        pixels, samples = fetch(daemon.endpoint, plan_text(ops), directory)
        log = daemon.log()
    found = re.findall(rf"batchd: augment: plan \S+ epoch 0 sample {sample}: "
                       r"(.*)$", log, re.M)
    assert len(found) == 1, log
    return pixels, samples, found[0]


def parse(text):
    """Describe's line -> [(function name, {parameter: value})]."""
    if not text.strip():
        return []
    tree = ast.parse(f"[{text}]", mode="eval")
    return [_call(node) for node in tree.body.elts]


def _call(node):
    return node.func.id, {kw.arg: _value(kw.value) for kw in node.keywords}


def _value(node):
    if isinstance(node, ast.Call):
        return _call(node)
    if isinstance(node, ast.List):
        return [_value(element) for element in node.elts]
    if isinstance(node, ast.Name):
        return INTERPOLATION[node.id]
    return ast.literal_eval(node)


def apply(calls, img):
    """torchvision's functional calls on a 3xHxW uint8 tensor."""
    for name, params in calls:
        img = apply_one(name, params, img)
    return img


def apply_one(name, params, img):
    if name == "identity":
        return img
    if name == "augmix":
        # As torchvision's AugMix.forward: float32 weights times the uint8
        # images, summed in chain order, then .to(uint8).
        weights = torch.tensor(params["weights"], dtype=torch.float32)
        mix = weights[0] * img
        for i, chain in enumerate(params["chains"]):
            mix.add_(weights[i + 1] * apply(chain, img))
        return mix.to(torch.uint8)
    return getattr(F, name)(img, **params)


def test_describe_parses_as_torchvision_calls():
    calls = parse("adjust_brightness(brightness_factor=1.25), affine("
                  "angle=0, translate=[-5, 0], scale=1, shear=[0, 0], "
                  "center=None, interpolation=nearest, fill=None), "
                  "augmix(weights=[0.5, 0.5], chains=[[invert()]])")
    assert calls[0] == ("adjust_brightness", {"brightness_factor": 1.25})
    assert calls[1][1]["interpolation"] == InterpolationMode.NEAREST
    assert calls[1][1]["center"] is None
    assert calls[2] == ("augmix", {"weights": [0.5, 0.5],
                                   "chains": [[("invert", {})]]})
    img = to_tensor(np.full((2, 2, 3), 10, dtype=np.uint8))
    # 0.5 * 10 + 0.5 * 245 = 127.5, truncated.
    assert int(apply(calls[2:], img)[0, 0, 0]) == 127


@pytest.mark.parametrize("ops, exact", [(LUT_OPS, True), (ALL_OPS, False)],
                         ids=["lookup-table-ops", "all-ops"])
def test_daemon_matches_torchvision_replay(dataset, tmp_path, ops, exact):
    with Daemon(DAEMON, {"d": dataset}, ["--workers", "1"],
                directory=tmp_path / "plain") as daemon:
        plain, plain_samples = fetch(daemon.endpoint, plan_text(""),
                                     tmp_path / "plain")
    assert plain.shape == (BATCH, SIZE, SIZE, 3)
    changed = 0
    for position, sample in enumerate(plain_samples):
        augmented, samples, line = drawn(dataset, ops, sample,
                                         tmp_path / f"sample-{sample}")
        assert samples == plain_samples
        calls = parse(line)
        ours = augmented[position]
        theirs = from_tensor(apply(calls, to_tensor(plain[position])))
        mean, worst = difference(ours, theirs)
        changed += int(not np.array_equal(ours, plain[position]))
        if exact:
            assert np.array_equal(ours, theirs), (line, mean, worst)
        else:
            far = float(np.mean(np.abs(ours.astype(np.int16) -
                                       theirs.astype(np.int16)) > 16))
            # Rounding (+-1) almost everywhere; a few pixels where a
            # nearest-neighbour sample point falls on a boundary.
            assert mean <= 1.5 and far <= 0.02, (line, mean, worst, far)
    assert changed > 0
