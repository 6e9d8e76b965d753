"""RandomErasing and MixUp/CutMix: the client's CPU path against
torchvision 0.14 (RandomErasing, and the classification references'
RandomMixup/RandomCutmix written from their definitions) for fixed
parameters, and end to end through a real daemon and batchd.Loader."""
import math

import pytest
import torch
import torchvision
from torchvision.transforms import functional as F

import batchd
from batchd import _native
from batchd import augment as A

MEAN, STD = batchd.IMAGENET_NORMALIZE
B, H, W = 6, 24, 20


def native(pixels, rects=(), kind="none", lam=1.0, box=(0, 0, 0, 0),
           in_layout="nhwc", out_layout="nchw", dtype="float32"):
    """The client's CPU path on uint8 `pixels` ([B, H, W, 3] for nhwc)."""
    n, h, w = pixels.shape[:3] if in_layout == "nhwc" else (
        pixels.shape[0], *pixels.shape[2:])
    shape = (n, 3, h, w) if out_layout == "nchw" else (n, h, w, 3)
    torch_dtype = {"float32": torch.float32, "float16": torch.float16,
                   "bfloat16": torch.bfloat16}[dtype]
    out = torch.empty(shape, dtype=torch_dtype)
    _native.normalize_erase_mix(
        pixels.contiguous().numpy(), out.view(torch.uint8).numpy(),
        list(pixels.shape), in_layout, out_layout, dtype, list(MEAN),
        list(STD), list(rects), kind, lam, box)
    return out


@pytest.fixture
def pixels():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (B, H, W, 3), dtype=torch.uint8, generator=g)


def test_normalisation_is_torchvisions(pixels):
    plain = native(pixels)
    want = F.normalize(pixels.permute(0, 3, 1, 2).float() / 255, MEAN, STD)
    # batchd's one fma per value against torchvision's divide, subtract,
    # divide: a few ulps apart.
    assert torch.allclose(plain, want, atol=2e-6, rtol=0)


def test_random_erasing_value_0_is_torchvisions_exactly(pixels, monkeypatch):
    plain = native(pixels)
    rects = [(0, 3, 4, 10, 7, False, 0), (2, 0, 0, 23, 19, False, 0),
             (5, 20, 15, 4, 5, False, 0)]
    erased = native(pixels, rects)
    want = plain.clone()
    for position, top, left, height, width, _, _ in rects:
        # torchvision 0.14's RandomErasing with get_params fixed to the
        # daemon's rectangle.
        eraser = torchvision.transforms.RandomErasing(p=1.0, value=0)
        monkeypatch.setattr(
            eraser, "get_params",
            lambda img, scale, ratio, value, r=(top, left, height, width): (
                *r, torch.tensor(0.0)))
        want[position] = eraser(want[position])
    assert torch.equal(erased, want)
    # Also through torchvision's functional form.
    assert torch.equal(erased[0], F.erase(plain[0], 3, 4, 10, 7,
                                          torch.tensor(0.0)))


def test_random_erasing_noise_is_normal_and_only_inside(pixels):
    plain = native(pixels)
    key = 0x0123456789abcdef
    erased = native(pixels, [(1, 2, 3, 20, 16, True, key)])
    inside = erased[1, :, 2:22, 3:19]
    outside = erased.clone()
    outside[1, :, 2:22, 3:19] = plain[1, :, 2:22, 3:19]
    assert torch.equal(outside, plain)
    # Value (c, y, x) of the rectangle is noise number (c*h + y)*w + x.
    assert inside[2, 5, 7].item() == _native.erasing_noise(
        key, (2 * 20 + 5) * 16 + 7)
    assert abs(inside.mean().item()) < 0.15
    assert abs(inside.std().item() - 1) < 0.1


def reference_targets(labels, num_classes, smoothing, lam):
    """timm's mixup_target: smoothed one-hot, then mixed with the batch
    rolled by one."""
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    one_hot = torch.full((len(labels), num_classes), off).scatter_(
        1, labels.view(-1, 1), on)
    return one_hot * lam + one_hot.roll(1, 0) * (1.0 - lam)


def test_mixup_is_the_references_random_mixup(pixels):
    lam = 0.6734
    plain = native(pixels)
    got = native(pixels, kind="mixup", lam=lam)
    # RandomMixup.forward (references/classification/transforms.py), with
    # lambda_param fixed.
    batch = plain.clone()
    batch_rolled = batch.roll(1, 0)
    batch_rolled.mul_(1.0 - lam)
    batch.mul_(lam).add_(batch_rolled)
    assert torch.equal(got, batch)


def test_cutmix_is_the_references_random_cutmix(pixels):
    plain = native(pixels)
    y1, x1, y2, x2 = 5, 2, 19, 15
    got = native(pixels, kind="cutmix", lam=0.3,
                 box=(y1, x1, y2 - y1, x2 - x1))
    # RandomCutmix.forward with the box fixed.
    batch = plain.clone()
    batch_rolled = batch.roll(1, 0)
    batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
    assert torch.equal(got, batch)


def test_erasing_comes_before_the_mix(pixels):
    rects = [(5, 0, 0, 10, 10, False, 0)]
    erased = native(pixels, rects)
    got = native(pixels, rects, kind="mixup", lam=0.25)
    want = erased * 0.25 + erased.roll(1, 0) * 0.75
    assert torch.equal(got, want)
    # Sample 0 mixes with the last, erased.
    assert torch.equal(got[0, :, :10, :10], (want[0, :, :10, :10]))


@pytest.mark.parametrize("kind, lam", [("mixup", 0.37), ("cutmix", 0.81),
                                       ("none", 1.0)])
def test_soft_labels_are_the_references_and_sum_to_one(kind, lam):
    labels = torch.tensor([3, 0, 9, 9, 1, 4])
    got = torch.frombuffer(bytearray(_native.soft_labels(
        labels.tolist(), 10, 0.1, kind, lam)), dtype=torch.float32).view(6, 10)
    assert torch.equal(got, reference_targets(labels, 10, 0.1, lam))
    assert torch.allclose(got.sum(1), torch.ones(6), atol=1e-6, rtol=0)
    # torchvision's reference smooths in the loss, after mixing: the same
    # labels up to rounding.
    mixed = F_one_hot_mix(labels, 10, lam)
    assert torch.allclose(got, mixed * 0.9 + 0.1 / 10, atol=1e-6, rtol=0)


def F_one_hot_mix(labels, num_classes, lam):
    target = torch.nn.functional.one_hot(labels, num_classes).float()
    return target * lam + target.roll(1, 0) * (1.0 - lam)


def test_half_outputs_are_the_float_rounded(pixels):
    rects = [(1, 2, 3, 20, 16, True, 99)]
    full = native(pixels, rects, kind="mixup", lam=0.4)
    for dtype, torch_dtype in (("float16", torch.float16),
                               ("bfloat16", torch.bfloat16)):
        half = native(pixels, rects, kind="mixup", lam=0.4, dtype=dtype)
        assert torch.equal(half, full.to(torch_dtype))


def test_python_classes_write_the_plan_fields():
    assert str(A.RandomErasing(0.1)) == "erasing { p: 0.1 }"
    assert str(A.RandomErasing()) == "erasing { }"
    assert str(A.RandomErasing(0.25, scale=(0.1, 0.2), value="random")) == (
        "erasing { p: 0.25 scale_min: 0.1 scale_max: 0.2 random_value: true }")
    assert str(A.MixupCutmix(mixup_alpha=0.8, cutmix_alpha=1.0,
                             switch_prob=0.5, label_smoothing=0.1,
                             num_classes=1000, prob=0.9)) == (
        "mix { mixup_alpha: 0.8 cutmix_alpha: 1 label_smoothing: 0.1 "
        "num_classes: 1000 prob: 0.9 }")
    for make, message in (
            (lambda: A.RandomErasing(1.5), "p must be in"),
            (lambda: A.RandomErasing(scale=(0.5, 0.1)), "scale"),
            (lambda: A.RandomErasing(value=3), "value must be 0 or 'random'"),
            (lambda: A.MixupCutmix(num_classes=10), "mixup_alpha > 0"),
            (lambda: A.MixupCutmix(mixup_alpha=-1, num_classes=10),
             "mixup_alpha"),
            (lambda: A.MixupCutmix(mixup_alpha=1), "num_classes is required"),
            (lambda: A.MixupCutmix(mixup_alpha=1, num_classes=10,
                                   label_smoothing=1.0), "label_smoothing"),
            (lambda: A.MixupCutmix(cutmix_alpha=1, num_classes=10,
                                   switch_prob=2), "switch_prob")):
        with pytest.raises(ValueError, match=message):
            make()


# -- End to end: a real daemon and batchd.Loader ---------------------------

def reference_batch(raw, labels, erase_mix):
    """What the Loader must yield, from the raw pixels of the same plan
    without erasing and mix and the parameters the daemon drew."""
    rects, mix = erase_mix
    kind, lam, box, smoothing, classes = mix
    images = native(raw, rects, kind, lam, box)
    soft = torch.frombuffer(bytearray(_native.soft_labels(
        labels.tolist(), classes, smoothing, kind, lam)),
        dtype=torch.float32).view(-1, classes)
    return images, soft


def test_loader_yields_erased_and_mixed_batches(daemon):
    common = dict(size=24, seed=11, rank=0, world_size=1, layout="nhwc")
    erasing = A.RandomErasing(p=0.7, value="random")
    mix = A.MixupCutmix(mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.1,
                        num_classes=4)
    raw_loader = batchd.Loader(daemon.endpoint, "tiny", 8, **common)
    loader = batchd.Loader(daemon.endpoint, "tiny", 8, normalize=(MEAN, STD),
                           erasing=erasing, mix=mix, **common)
    assert loader.backend == "device"
    kinds, erased = set(), 0
    with raw_loader, loader:
        for epoch in range(2):
            raw_loader.set_epoch(epoch)
            loader.set_epoch(epoch)
            for (raw, labels), (images, soft) in zip(raw_loader, loader):
                assert images.dtype == torch.float32
                assert images.shape == (len(labels), 24, 24, 3)
                assert soft.shape == (len(labels), 4)
                want_images, want_soft = reference_batch(
                    raw, labels, loader.erase_mix)
                assert torch.equal(images, want_images.permute(0, 2, 3, 1))
                assert torch.equal(soft, want_soft)
                assert torch.allclose(soft.sum(1), torch.ones(len(labels)),
                                      atol=1e-6, rtol=0)
                kinds.add(loader.erase_mix[1][0])
                erased += len(loader.erase_mix[0])
    # Over 12 batches the switch takes both sides, and about 70 % of 96
    # samples are erased.
    assert kinds >= {"mixup", "cutmix"}
    assert 45 <= erased <= 85


def test_loader_draws_are_a_pure_function_of_the_plan(daemon):
    def run():
        with batchd.Loader(daemon.endpoint, "tiny", 8, size=24, seed=5,
                           rank=0, world_size=1, normalize=(MEAN, STD),
                           erasing=A.RandomErasing(0.5),
                           mix=A.MixupCutmix(cutmix_alpha=1.0,
                                             num_classes=4)) as loader:
            return [(images.clone(), soft.clone()) for images, soft in loader]
    first, second = run(), run()
    assert len(first) == 6
    for (a, la), (b, lb) in zip(first, second):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_bad_plans_are_refused_naming_the_field(daemon):
    with pytest.raises(batchd.errors.InvalidArgumentError,
                       match="pipeline.mix.num_classes"):
        batchd.Loader(daemon.endpoint, "tiny", 8, size=24, rank=0,
                      world_size=1, normalize=(MEAN, STD),
                      mix=A.MixupCutmix(mixup_alpha=0.2, num_classes=5))
    with pytest.raises(batchd.errors.InvalidArgumentError,
                       match="pipeline.erasing.ratio_min/ratio_max"):
        batchd.Loader(daemon.endpoint, "tiny", 8, size=24, rank=0,
                      world_size=1, normalize=(MEAN, STD),
                      augment="erasing { ratio_min: 2 ratio_max: 1 }")
    with pytest.raises(ValueError, match="normalize"):
        batchd.Loader(daemon.endpoint, "tiny", 8, size=24, rank=0,
                      world_size=1, erasing=A.RandomErasing())
    with pytest.raises(ValueError, match="backend"):
        batchd.Loader(daemon.endpoint, "tiny", 8, size=24, rank=0,
                      world_size=1, normalize=(MEAN, STD), backend="host",
                      erasing=A.RandomErasing())
    with pytest.raises(TypeError, match="RandomErasing"):
        batchd.Loader(daemon.endpoint, "tiny", 8, size=24, rank=0,
                      world_size=1, normalize=(MEAN, STD), erasing=0.1)
