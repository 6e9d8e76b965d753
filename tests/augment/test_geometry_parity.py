"""Parity of batchd's geometric ops and crop resize with torchvision 0.14.

Compares batchd-augment-replay's affine, rotate, vflip and resized crops
with torchvision.transforms.functional on uint8 tensors of real
photographs:

  * the policies' ops at every magnitude bin of their augmentation spaces
    (AutoAugment/RandAugment, TrivialAugmentWide, AugMix), both signs:
    ShearX/ShearY (degrees(atan(magnitude)) about the top-left corner),
    TranslateX/TranslateY (whole pixels), Rotate;
  * RandomAffine- and RandomRotation-like mixed parameters;
  * nearest and bilinear, with fill=None and with a fill;
  * F.resized_crop with antialiased bilinear and bicubic at windows drawn
    as RandomResizedCrop draws them, output sizes 96, 176 and 224.

Each group's bounds are the measured differences plus a little headroom.
The table of (op, params, mean, max, fraction differing) is printed and
appended to the file named by $BATCHD_AUGMENT_REPORT when set.
"""
import math
import os

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

from replay import difference, from_tensor, photographs, replay_many, to_tensor

SIZE = 224
FILL = (128, 64, 192)
NUM_BINS = 31
CHUNK = 150  # replay commands per batchd-augment-replay run


# The geometric ops' magnitude ranges of each policy's augmentation space
# (autoaugment.py, _augmentation_space) for a SIZE x SIZE image.
SPACES = {
    "autoaugment": {"shear": 0.3, "translate": 150.0 / 331.0 * SIZE,
                    "rotate": 30.0},
    "wide": {"shear": 0.99, "translate": 32.0, "rotate": 135.0},
    "augmix": {"shear": 0.3, "translate": SIZE / 3.0, "rotate": 30.0},
}


def policy_ops():
    """[(group, params label, replay params, torchvision call)] of every
    distinct geometric op the policies can apply."""
    ops = {}
    for space, limits in SPACES.items():
        for kind, limit in limits.items():
            bins = torch.linspace(0.0, limit, NUM_BINS)
            for b in range(NUM_BINS):
                # float(tensor.item()), as the policies read it.
                for sign in (1.0, -1.0):
                    magnitude = sign * float(bins[b].item())
                    for op in {"shear": ("ShearX", "ShearY"),
                               "translate": ("TranslateX", "TranslateY"),
                               "rotate": ("Rotate",)}[kind]:
                        key = (op, magnitude if op != "TranslateX" and
                               op != "TranslateY" else int(magnitude))
                        ops.setdefault(key, f"{space} bin {b}")
    return sorted(ops.items())


def policy_case(op, magnitude, mode, fill):
    """The replay command and torchvision call of autoaugment._apply_op."""
    params = {"interpolation": mode}
    if fill is not None:
        params.update(fill_r=fill[0], fill_g=fill[1], fill_b=fill[2])
    interpolation = InterpolationMode(mode)
    fill_list = None if fill is None else [float(f) for f in fill]
    if op in ("ShearX", "ShearY"):
        shear = math.degrees(math.atan(magnitude))
        shears = [shear, 0.0] if op == "ShearX" else [0.0, shear]
        params.update(angle=0.0, shear_x=shears[0], shear_y=shears[1],
                      center_x=0, center_y=0)
        return "affine", params, lambda t: F.affine(
            t, angle=0.0, translate=[0, 0], scale=1.0, shear=shears,
            interpolation=interpolation, fill=fill_list, center=[0, 0])
    if op in ("TranslateX", "TranslateY"):
        translate = [magnitude, 0] if op == "TranslateX" else [0, magnitude]
        params.update(angle=0.0, translate_x=translate[0],
                      translate_y=translate[1])
        return "affine", params, lambda t: F.affine(
            t, angle=0.0, translate=translate, scale=1.0, shear=[0.0, 0.0],
            interpolation=interpolation, fill=fill_list)
    params.update(angle=magnitude)
    return "rotate", params, lambda t: F.rotate(
        t, magnitude, interpolation=interpolation, fill=fill_list)


def random_affine_cases(count=24):
    """RandomAffine(degrees=30, translate=(0.1, 0.1), scale=(0.8, 1.2),
    shear=(-10, 10, -10, 10)) and RandomRotation(180)-like parameters,
    drawn as torchvision draws them (float32 values), some about a corner."""
    generator = torch.Generator().manual_seed(14)

    def uniform(lo, hi):
        return float(torch.empty(1).uniform_(lo, hi, generator=generator)
                     .item())

    cases = []
    for i in range(count):
        angle = uniform(-30, 30)
        translate = [int(round(uniform(-22.4, 22.4))),
                     int(round(uniform(-22.4, 22.4)))]
        scale = uniform(0.8, 1.2)
        shear = [uniform(-10, 10), uniform(-10, 10)]
        center = [int(uniform(0, SIZE)), int(uniform(0, SIZE))] \
            if i % 3 == 0 else None
        cases.append(("affine", angle, translate, scale, shear, center))
        cases.append(("rotate", uniform(-180, 180)))
    return cases


def random_case(case, mode, fill):
    interpolation = InterpolationMode(mode)
    fill_list = None if fill is None else [float(f) for f in fill]
    params = {"interpolation": mode}
    if fill is not None:
        params.update(fill_r=fill[0], fill_g=fill[1], fill_b=fill[2])
    if case[0] == "rotate":
        angle = case[1]
        params.update(angle=angle)
        return "rotate", params, lambda t: F.rotate(
            t, angle, interpolation=interpolation, fill=fill_list)
    _, angle, translate, scale, shear, center = case
    params.update(angle=angle, translate_x=translate[0],
                  translate_y=translate[1], scale=scale, shear_x=shear[0],
                  shear_y=shear[1])
    if center is not None:
        params.update(center_x=center[0], center_y=center[1])
    return "affine", params, lambda t: F.affine(
        t, angle=angle, translate=translate, scale=scale, shear=shear,
        interpolation=interpolation, fill=fill_list, center=center)


def full_photographs():
    """The skimage photographs at their own sizes (300x451 to 512x512)."""
    import skimage.data as data
    images = []
    for name in ("astronaut", "coffee", "chelsea", "rocket",
                 "immunohistochemistry"):
        pixels = getattr(data, name)()[..., :3]
        images.append(np.ascontiguousarray(pixels))
    return images


class Results:
    """Differences per group: rows of (op, params, mean, max, fraction of
    pixels differing), and the worst of each group."""

    def __init__(self):
        self.rows = {}

    def add(self, group, label, ours, theirs):
        mean, largest = difference(ours, theirs)
        differing = float((ours != theirs).any(axis=-1).mean())
        over_one = float((np.abs(ours.astype(np.int16) -
                                 theirs.astype(np.int16)) > 1).mean())
        self.rows.setdefault(group, []).append(
            (label, mean, largest, differing, over_one))

    def worst(self, group):
        rows = self.rows[group]
        return (max(r[1] for r in rows), max(r[2] for r in rows),
                max(r[3] for r in rows), max(r[4] for r in rows))

    def table(self):
        lines = ["| op | params (worst case) | cases | mean abs diff "
                 "(worst) | max | fraction of pixels differing (worst) "
                 "| fraction of values off by > 1 |",
                 "|---|---|---|---|---|---|---|"]
        for group, rows in self.rows.items():
            worst = max(rows, key=lambda r: (r[3], r[1]))
            mean, largest, differing, over_one = self.worst(group)
            lines.append(f"| {group} | {worst[0]} | {len(rows)} | "
                         f"{mean:.5f} | {largest} | {differing:.5f} | "
                         f"{over_one:.6f} |")
        return "\n".join(lines)


def run(results, cases):
    """cases: [(group, label, op, image, params, reference tensor fn,
    crop)]; crop: output (height, width) in the replayed image's corner,
    or None for the whole image."""
    for start in range(0, len(cases), CHUNK):
        chunk = cases[start:start + CHUNK]
        outputs = replay_many([(op, image, params)
                               for _, _, op, image, params, _, _ in chunk])
        for (group, label, _, image, _, reference, crop), ours in zip(
                chunk, outputs):
            theirs = from_tensor(reference(to_tensor(image)))
            if crop is not None:
                ours = ours[:crop[0], :crop[1]]
            results.add(group, label, ours, theirs)


@pytest.fixture(scope="module")
def results():
    torch.set_num_threads(1)
    photos = photographs(SIZE)
    results = Results()
    cases = []
    for i, ((op, magnitude), origin) in enumerate(policy_ops()):
        for mode in ("nearest", "bilinear"):
            # fill=None on every photograph; a fill on one, in turn.
            for fill, images in ((None, photos), (FILL, [photos[i % 5]])):
                name, params, reference = policy_case(op, magnitude, mode,
                                                      fill)
                group = (f"{op} {mode} fill="
                         f"{'None' if fill is None else 'rgb'}")
                label = f"{magnitude:.4g} ({origin})"
                cases += [(group, label, name, image, params, reference, None)
                          for image in images]
    for i, case in enumerate(random_affine_cases()):
        for mode in ("nearest", "bilinear"):
            for fill in (None, (0, 0, 0), FILL):
                name, params, reference = random_case(case, mode, fill)
                group = (f"Random{'Affine' if name == 'affine' else 'Rotation'}"
                         f" {mode} fill="
                         f"{'None' if fill is None else fill}")
                label = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else
                                 f"{k}={v}" for k, v in params.items()
                                 if k != "interpolation")
                cases.append((group, label, name, photos[i % 5], params,
                              reference, None))
    for photo in photos:
        cases.append(("vflip", "", "vflip", photo, {}, F.vflip, None))
    torch.manual_seed(2023)
    for photo in full_photographs():
        tensor = to_tensor(photo)
        windows = [(0, 0, photo.shape[0], photo.shape[1])]
        windows += [T.RandomResizedCrop.get_params(
            tensor, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            for _ in range(5)]
        for top, left, height, width in windows:
            for size in (96, 176, 224):
                for mode in ("bilinear", "bicubic"):
                    params = dict(out_width=size, out_height=size, x=left,
                                  y=top, w=width, h=height)

                    def reference(t, top=top, left=left, height=height,
                                  width=width, size=size, mode=mode):
                        return F.resized_crop(t, top, left, height, width,
                                              [size, size],
                                              InterpolationMode(mode),
                                              antialias=True)
                    cases.append((f"resized_crop {mode}",
                                  f"{photo.shape[1]}x{photo.shape[0]} "
                                  f"window {left},{top} {width}x{height} "
                                  f"-> {size}",
                                  f"resize_{mode}", photo, params,
                                  reference, (size, size)))
    run(results, cases)
    if os.environ.get("BATCHD_AUGMENT_VERBOSE"):
        for group, rows in results.rows.items():
            for row in rows:
                print(group, *row)
    yield results
    table = results.table()
    print("\n" + table)
    report = os.environ.get("BATCHD_AUGMENT_REPORT")
    if report:
        with open(report, "a") as out:
            out.write("## Geometric ops and resized crops vs torchvision "
                      "0.14\n\n" + table + "\n\n")


# Bounds: (mean, max, fraction of pixels differing, fraction of values off
# by more than 1), each the worst single case of the group.
NEAREST = (0.01, 255, 0.0005, 0.0005)
BILINEAR = (0.002, 1, 0.001, 0.0)


def check(results, prefix, bounds):
    groups = [g for g in results.rows if g.startswith(prefix)]
    assert groups, prefix
    for group in groups:
        mean, largest, differing, over_one = results.worst(group)
        assert mean <= bounds[0], (group, mean)
        assert largest <= bounds[1], (group, largest)
        assert differing <= bounds[2], (group, differing)
        assert over_one <= bounds[3], (group, over_one)


@pytest.mark.parametrize("op", ["ShearX", "ShearY", "TranslateX",
                                "TranslateY", "Rotate"])
def test_policy_ops_nearest(results, op):
    check(results, f"{op} nearest", NEAREST)


@pytest.mark.parametrize("op", ["ShearX", "ShearY", "TranslateX",
                                "TranslateY", "Rotate"])
def test_policy_ops_bilinear(results, op):
    check(results, f"{op} bilinear", BILINEAR)


def test_whole_pixel_translations_are_exact(results):
    for group in results.rows:
        if group.startswith("Translate"):
            assert results.worst(group)[1] == 0, group


@pytest.mark.parametrize("op", ["RandomAffine", "RandomRotation"])
def test_random_affine_and_rotation(results, op):
    check(results, f"{op} nearest", NEAREST)
    check(results, f"{op} bilinear", BILINEAR)


def test_vflip_is_exact(results):
    assert results.worst("vflip") == (0.0, 0, 0.0, 0.0)


def test_resized_crop_bilinear(results):
    # Each pass rounds to bytes; torchvision rounds once, at the end.
    check(results, "resized_crop bilinear", (0.25, 1, 0.5, 0.0))


def test_resized_crop_bicubic(results):
    # As bilinear, and each pass also clamps its overshoot to 0..255 where
    # torchvision clamps only at the end: a few values at saturated edges
    # differ by more.
    check(results, "resized_crop bicubic", (0.25, 14, 0.5, 0.0025))
