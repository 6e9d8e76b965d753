"""Parity of batchd's colour ops (server/augment/color_ops.h) with
torchvision 0.14's functional ops on uint8 tensors, on the five
photographs of replay.photographs().

The parameters are the ones torchvision's policies and transforms use:
every magnitude bin of TrivialAugmentWide's, RandAugment's and
AutoAugment's tables (taken from torchvision itself, signed both ways and
passed as `_apply_op` passes them: `1.0 + magnitude` in double,
`int(magnitude)`, the float threshold), ColorJitter-style factors drawn
as its get_params draws them (float32 uniform), and GaussianBlur's odd
kernels 3..23 with several sigmas.

Every op but gaussian_blur matches bit for bit. gaussian_blur convolves
separably in float32 while torchvision runs one 2-D conv2d, so a value
within float rounding of n + 0.5 may round the other way: at most 1 apart,
on a tiny fraction of the values.

The measured table (op, parameter sets x photographs, mean |difference|,
max, values that differ) prints with `pytest -s` and is appended, as Markdown, to the file
named by $BATCHD_AUGMENT_REPORT when that is set.
"""
import os

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from torchvision.transforms import autoaugment

from replay import difference, from_tensor, photographs, replay_many, to_tensor

torch.set_num_threads(1)

# Bounds for the ops that may differ, per photograph and parameter set.
BLUR_MAX = 1
BLUR_MEAN = 1e-3        # mean |difference| over one image's values
BLUR_FRACTION = 1e-3    # fraction of one image's values that differ

EXACT_OPS = ("adjust_brightness", "adjust_contrast", "adjust_saturation",
             "adjust_sharpness", "adjust_hue", "posterize", "solarize",
             "invert", "autocontrast", "equalize", "grayscale")


def _policy_magnitudes():
    """{policy op name: [magnitude, ...]} over the three policies' tables,
    each signed magnitude as _apply_op receives it."""
    spaces = [
        autoaugment.TrivialAugmentWide()._augmentation_space(31),
        autoaugment.RandAugment()._augmentation_space(31, (224, 224)),
        autoaugment.AutoAugment()._augmentation_space(10, (224, 224)),
    ]
    out = {}
    for space in spaces:
        for name, (magnitudes, signed) in space.items():
            if magnitudes.ndim == 0:
                continue
            for m in magnitudes.tolist():
                values = out.setdefault(name, set())
                values.add(float(m))
                if signed:
                    values.add(-float(m))
    return {name: sorted(values) for name, values in out.items()}


def _jitter(lo, hi, count, seed):
    """ColorJitter.get_params' draws: float(torch.empty(1).uniform_())."""
    torch.manual_seed(seed)
    return [float(torch.empty(1).uniform_(lo, hi)) for _ in range(count)]


def _cases():
    """[(op, params, torchvision function of a 3xHxW uint8 tensor)]."""
    magnitudes = _policy_magnitudes()
    cases = []
    blends = {"Brightness": ("adjust_brightness", F.adjust_brightness),
              "Contrast": ("adjust_contrast", F.adjust_contrast),
              "Color": ("adjust_saturation", F.adjust_saturation),
              "Sharpness": ("adjust_sharpness", F.adjust_sharpness)}
    for policy_name, (op, fn) in blends.items():
        factors = [1.0 + m for m in magnitudes[policy_name]]
        factors += _jitter(0.6, 1.4, 6, seed=len(op)) + [0.0, 0.5, 2.0, 5.0]
        for factor in factors:
            cases.append((op, {"factor": repr(factor)},
                          lambda t, fn=fn, f=factor: fn(t, f)))
    hues = _jitter(-0.5, 0.5, 10, seed=7) + [-0.5, -0.25, 0.0, 0.1, 0.5]
    for hue in hues:
        cases.append(("adjust_hue", {"factor": repr(hue)},
                      lambda t, h=hue: F.adjust_hue(t, h)))
    for bits in sorted({int(m) for m in magnitudes["Posterize"]} |
                       set(range(9))):
        cases.append(("posterize", {"bits": bits},
                      lambda t, b=bits: F.posterize(t, b)))
    for threshold in magnitudes["Solarize"] + [128.0, 0.5]:
        cases.append(("solarize", {"threshold": repr(threshold)},
                      lambda t, th=threshold: F.solarize(t, th)))
    cases.append(("invert", {}, F.invert))
    cases.append(("autocontrast", {}, F.autocontrast))
    cases.append(("equalize", {}, F.equalize))
    cases.append(("grayscale", {},
                  lambda t: F.rgb_to_grayscale(t, num_output_channels=3)))
    # GaussianBlur(kernel_size, sigma=(0.1, 2.0)) draws sigma as
    # torch.empty(1).uniform_(0.1, 2.0).item(): float32 values.
    sigmas = [float(np.float32(s)) for s in (0.1, 0.5, 1.0, 2.0, 5.0)]
    sigmas += _jitter(0.1, 2.0, 2, seed=11)
    blurs = [((k, k), (s, s)) for k in range(3, 24, 2) for s in sigmas]
    blurs += [((3, 9), (0.8, 2.5)), ((23, 1), (4.0, 1.0)), ((1, 5), (1.0, 1.5))]
    for (kx, ky), (sx, sy) in blurs:
        sx, sy = float(np.float32(sx)), float(np.float32(sy))
        cases.append(("gaussian_blur",
                      {"kernel_x": kx, "kernel_y": ky, "sigma_x": repr(sx),
                       "sigma_y": repr(sy)},
                      lambda t, k=[kx, ky], s=[sx, sy]: F.gaussian_blur(t, k, s)))
    return cases


CASES = _cases()
OPS = sorted({op for op, _, _ in CASES})
MEASURED = {}  # op -> [(params, mean, max, differing values, values)]


@pytest.fixture(scope="module")
def photos():
    return photographs()


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    if not MEASURED:
        return
    lines = ["| op | parameter sets x photos | mean abs diff | max abs diff "
             "| values that differ |",
             "|---|---|---|---|---|"]
    for op in sorted(MEASURED):
        rows = MEASURED[op]
        mean = sum(r[1] for r in rows) / len(rows)
        worst = max(r[2] for r in rows)
        differ = sum(r[3] for r in rows)
        values = sum(r[4] for r in rows)
        lines.append(f"| {op} | {len(rows)} | {mean:.2e} | {worst} | "
                     f"{differ} / {values} |")
    table = "\n".join(lines)
    print("\nbatchd colour ops against torchvision 0.14, 5 photographs "
          "224x224:\n" + table)
    path = os.environ.get("BATCHD_AUGMENT_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(table + "\n")


@pytest.mark.parametrize("op", OPS)
def test_matches_torchvision(op, photos):
    cases = [(params, fn) for name, params, fn in CASES if name == op]
    commands = [(op, photo, params) for params, _ in cases for photo in photos]
    ours = replay_many(commands)
    failures = []
    rows = MEASURED.setdefault(op, [])
    i = 0
    for params, fn in cases:
        for index, photo in enumerate(photos):
            theirs = from_tensor(fn(to_tensor(photo.copy())))
            mean, worst = difference(ours[i], theirs)
            differ = int(np.count_nonzero(ours[i] != theirs))
            rows.append((params, mean, worst, differ, theirs.size))
            i += 1
            if op in EXACT_OPS:
                ok = differ == 0
            else:
                ok = (worst <= BLUR_MAX and mean <= BLUR_MEAN and
                      differ <= BLUR_FRACTION * theirs.size)
            if not ok:
                failures.append(f"{op} {params} photo {index}: mean {mean:.4g} "
                                f"max {worst} ({differ} values differ)")
    assert not failures, "\n".join(failures[:20])
