"""batchd.augment: each op's text-format entry, its argument checks,
reference_recipe's mapping of torchvision's reference flags, and the plans
Loader(augment=...) and batchd-client's flags make from them."""
import argparse
import collections
import subprocess

import pytest
import torch

import batchd
from batchd import _native
from batchd import augment as A

BILINEAR = "interpolation: INTERPOLATION_BILINEAR"


@pytest.mark.parametrize("op, text", [
    (A.TrivialAugmentWide(), "augment { trivial_augment_wide { } }"),
    (A.TrivialAugmentWide(num_magnitude_bins=16, interpolation="bilinear",
                          fill=[128, 0, 255]),
     "augment { trivial_augment_wide { num_magnitude_bins: 16 " + BILINEAR +
     " fill: 128 fill: 0 fill: 255 } }"),
    (A.RandAugment(), "augment { rand_augment { } }"),
    (A.RandAugment(num_ops=3, magnitude=15, num_magnitude_bins=21,
                   magnitude_std=0.5, fill=7),
     "augment { rand_augment { num_ops: 3 magnitude: 15 num_magnitude_bins: "
     "21 magnitude_std: 0.5 fill: 7 fill: 7 fill: 7 } }"),
    (A.AutoAugment(), "augment { auto_augment { } }"),
    (A.AutoAugment("cifar10"),
     "augment { auto_augment { policy: POLICY_CIFAR10 } }"),
    (A.AutoAugment(policy="svhn", interpolation="bilinear"),
     "augment { auto_augment { policy: POLICY_SVHN " + BILINEAR + " } }"),
    # torchvision's AugMix is bilinear by default; the entry says so.
    (A.AugMix(), "augment { aug_mix { " + BILINEAR + " } }"),
    (A.AugMix(severity=5, mixture_width=4, chain_depth=2, alpha=0.5,
              all_ops=False, interpolation="nearest"),
     "augment { aug_mix { severity: 5 mixture_width: 4 chain_depth: 2 "
     "alpha: 0.5 all_ops: false interpolation: INTERPOLATION_NEAREST } }"),
    (A.ColorJitter(), "augment { color_jitter { } }"),
    (A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
     "augment { color_jitter { brightness: 0.4 contrast: 0.4 saturation: "
     "0.4 hue: 0.1 p: 0.8 } }"),
    # torchvision's (min, max) forms of the same ranges.
    (A.ColorJitter(brightness=(0.6, 1.4), contrast=(0, 2.5),
                   hue=(-0.2, 0.2)),
     "augment { color_jitter { brightness: 0.4 contrast: 1.5 hue: 0.2 } }"),
    (A.RandomGrayscale(), "augment { random_grayscale { } }"),
    (A.RandomGrayscale(p=0.2), "augment { random_grayscale { p: 0.2 } }"),
    (A.GaussianBlur(23), "augment { gaussian_blur { kernel_size: 23 } }"),
    (A.GaussianBlur((5, 9), sigma=1.5, p=0.5),
     "augment { gaussian_blur { kernel_size: 5 kernel_size_y: 9 sigma_min: "
     "1.5 sigma_max: 1.5 p: 0.5 } }"),
    (A.GaussianBlur([3], sigma=(0.5, 3)),
     "augment { gaussian_blur { kernel_size: 3 sigma_min: 0.5 sigma_max: 3 "
     "} }"),
    (A.RandomSolarize(128), "augment { random_solarize { } }"),
    (A.RandomSolarize(192.5, p=1),
     "augment { random_solarize { threshold: 192.5 p: 1 } }"),
    (A.RandomPosterize(4), "augment { random_posterize { } }"),
    (A.RandomPosterize(2, p=0.25),
     "augment { random_posterize { bits: 2 p: 0.25 } }"),
    (A.RandomAutocontrast(), "augment { random_autocontrast { } }"),
    (A.RandomEqualize(p=0.3), "augment { random_equalize { p: 0.3 } }"),
    (A.RandomInvert(p=0), "augment { random_invert { p: 0 } }"),
    (A.RandomVerticalFlip(), "augment { random_vertical_flip { } }"),
    (A.RandomRotation(30),
     "augment { random_rotation { degrees_min: -30 degrees_max: 30 } }"),
    (A.RandomRotation((-10, 45.5), interpolation="bilinear", fill=0),
     "augment { random_rotation { degrees_min: -10 degrees_max: 45.5 " +
     BILINEAR + " } }"),
    (A.RandomAffine(0), "augment { random_affine { } }"),
    (A.RandomAffine(10, translate=(0.1, 0.2), scale=(0.9, 1.1), shear=5),
     "augment { random_affine { degrees_min: -10 degrees_max: 10 "
     "translate_x: 0.1 translate_y: 0.2 scale_min: 0.9 scale_max: 1.1 "
     "shear_x_min: -5 shear_x_max: 5 } }"),
    (A.RandomAffine((0, 90), shear=(-1, 2, -3, 4), fill=(1, 2, 3)),
     "augment { random_affine { degrees_max: 90 shear_x_min: -1 "
     "shear_x_max: 2 shear_y_min: -3 shear_y_max: 4 fill: 1 fill: 2 fill: 3 "
     "} }"),
])
def test_each_op_writes_its_entry(op, text):
    assert str(op) == text
    # The native side parses it into the plan.
    plan = _native.LoaderArgs(augment=text).plan()
    assert f"  augment {{\n    {op.field} {{" in plan


def test_ops_compare_by_their_entry_and_show_their_arguments():
    assert A.RandAugment() == A.RandAugment(num_ops=2, magnitude=9)
    assert A.RandAugment() != A.RandAugment(num_ops=3)
    assert len({A.RandomInvert(), A.RandomInvert(0.5)}) == 1
    assert repr(A.GaussianBlur(23, p=0.5)) == (
        "GaussianBlur(kernel_size=23, sigma=(0.1, 2.0), p=0.5)")


def test_torchvision_enums_are_taken():
    transforms = pytest.importorskip("torchvision.transforms")
    mode = transforms.InterpolationMode
    assert str(A.TrivialAugmentWide(interpolation=mode.BILINEAR)) == (
        "augment { trivial_augment_wide { " + BILINEAR + " } }")
    assert A.AutoAugment(transforms.AutoAugmentPolicy.SVHN) == (
        A.AutoAugment("svhn"))


@pytest.mark.parametrize("make, message", [
    (lambda: A.TrivialAugmentWide(num_magnitude_bins=1),
     "num_magnitude_bins must be 2..1024"),
    (lambda: A.TrivialAugmentWide(interpolation="bicubic"),
     "interpolation must be 'nearest' or 'bilinear'"),
    (lambda: A.TrivialAugmentWide(fill=[1, 2]), "fill must be a number or 1 "
     "or 3"),
    (lambda: A.TrivialAugmentWide(fill=256), "fill must be 0..255"),
    (lambda: A.RandAugment(num_ops=17), "num_ops must be 0..16"),
    (lambda: A.RandAugment(magnitude=31), "magnitude must be 0..30"),
    (lambda: A.RandAugment(magnitude=10, num_magnitude_bins=10),
     "magnitude must be 0..9"),
    (lambda: A.RandAugment(magnitude=2.5), "magnitude must be an integer"),
    (lambda: A.RandAugment(magnitude_std=-1), "magnitude_std must be in"),
    (lambda: A.AutoAugment("imagenet1k"), "policy must be 'imagenet'"),
    (lambda: A.AugMix(severity=11), "severity must be 1..10"),
    (lambda: A.AugMix(mixture_width=0), "mixture_width must be 1..16"),
    (lambda: A.AugMix(chain_depth=0), r"chain_depth \(or -1\) must be"),
    (lambda: A.AugMix(alpha=0), "alpha must be > 0"),
    (lambda: A.AugMix(all_ops=1), "all_ops must be True or False"),
    (lambda: A.ColorJitter(brightness=-0.1), "brightness must be in"),
    (lambda: A.ColorJitter(contrast=(0.8, 1.0)), "contrast: batchd draws"),
    (lambda: A.ColorJitter(saturation="x"), "saturation must be a number or "
     r"a \(min, max\) pair"),
    (lambda: A.ColorJitter(hue=0.6), "hue must be in"),
    (lambda: A.ColorJitter(hue=(0, 0.2)), "hue: batchd draws"),
    (lambda: A.ColorJitter(p=1.5), "p must be in"),
    (lambda: A.RandomGrayscale(p=-0.1), "p must be in"),
    (lambda: A.GaussianBlur(4), "kernel_size must be odd"),
    (lambda: A.GaussianBlur(257), "kernel_size must be 1..255"),
    (lambda: A.GaussianBlur((3, 5, 7)), "kernel_size must be an odd number "
     r"or a \(width, height\) pair"),
    (lambda: A.GaussianBlur(3, sigma=0), "sigma must be > 0"),
    (lambda: A.GaussianBlur(3, sigma=(2.0, 1.0)), "sigma must be > 0"),
    (lambda: A.RandomSolarize(300), "threshold must be in"),
    (lambda: A.RandomPosterize(9), "bits must be 0..8"),
    (lambda: A.RandomInvert(p=2), "p must be in"),
    (lambda: A.RandomVerticalFlip(p=None), "p must be a number"),
    (lambda: A.RandomRotation(-5), "degrees must be in"),
    (lambda: A.RandomRotation((10, -10)), "degrees must be \\(min, max\\)"),
    (lambda: A.RandomRotation(400), "degrees must be in"),
    (lambda: A.RandomRotation(5, expand=True), "expand=True is not "
     "supported"),
    (lambda: A.RandomRotation(5, center=(1, 1)), "center is not supported"),
    (lambda: A.RandomAffine(5, translate=(0.1, 1.5)), "translate values "
     "must be in"),
    (lambda: A.RandomAffine(5, scale=(0, 1)), "scale must be"),
    (lambda: A.RandomAffine(5, shear=200), "shear must be in"),
    (lambda: A.RandomAffine(5, shear=(1, 2, 3)), "shear must be a number"),
])
def test_arguments_are_checked_naming_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_to_text_joins_entries_and_refuses_what_is_not_an_op():
    assert A.to_text([A.RandomInvert(), A.RandomGrayscale(0.2)]) == (
        "augment { random_invert { } }\n"
        "augment { random_grayscale { p: 0.2 } }")
    assert A.to_text("augment { random_invert { } }") == (
        "augment { random_invert { } }")
    assert A.to_text([]) == ""
    with pytest.raises(ValueError, match="not one op"):
        A.to_text(A.RandomInvert())
    with pytest.raises(ValueError, match="takes batchd.augment ops"):
        A.to_text([A.RandomInvert(), "random_invert"])


# -- reference_recipe ------------------------------------------------------

def reference_args(**flags):
    """The reference's parsed flags with its defaults
    (references/classification/train.py)."""
    args = argparse.Namespace(auto_augment=None, ra_magnitude=9,
                              augmix_severity=3, interpolation="bilinear",
                              train_crop_size=224, val_resize_size=256,
                              val_crop_size=224, random_erase=0.0,
                              mixup_alpha=0.0, cutmix_alpha=0.0)
    for name, value in flags.items():
        setattr(args, name, value)
    return args


def test_reference_recipe_defaults():
    recipe = A.reference_recipe(reference_args())
    assert recipe.train == {"mode": "train", "size": 224,
                            "interpolation": "bilinear", "augment": [],
                            "normalize": batchd.IMAGENET_NORMALIZE}
    assert recipe.eval == {"mode": "eval", "size": 224, "resize_shorter": 256,
                           "interpolation": "bilinear",
                           "normalize": batchd.IMAGENET_NORMALIZE}
    assert recipe.notes == ()
    # Missing flags take the reference's defaults; a dict works too.
    assert A.reference_recipe({}) == recipe
    assert A.reference_recipe(argparse.Namespace()) == recipe
    assert batchd.reference_recipe is A.reference_recipe


@pytest.mark.parametrize("flags, policy", [
    # ClassificationPresetTrain hands the crop's interpolation to the policy.
    (dict(auto_augment="ta_wide"), A.TrivialAugmentWide(
        interpolation="bilinear")),
    (dict(auto_augment="ra"), A.RandAugment(interpolation="bilinear")),
    (dict(auto_augment="ra", ra_magnitude=15),
     A.RandAugment(magnitude=15, interpolation="bilinear")),
    (dict(auto_augment="augmix"), A.AugMix(interpolation="bilinear")),
    (dict(auto_augment="augmix", augmix_severity=6),
     A.AugMix(severity=6, interpolation="bilinear")),
    (dict(auto_augment="imagenet"), A.AutoAugment(interpolation="bilinear")),
    (dict(auto_augment="cifar10"), A.AutoAugment("cifar10", "bilinear")),
    (dict(auto_augment="svhn"), A.AutoAugment("svhn", "bilinear")),
    # The ops have no bicubic: the policy stays bilinear.
    (dict(auto_augment="ta_wide", interpolation="bicubic"),
     A.TrivialAugmentWide(interpolation="bilinear")),
])
def test_reference_recipe_policies(flags, policy):
    recipe = A.reference_recipe(reference_args(**flags))
    assert recipe.train["augment"] == [policy]
    assert "augment" not in recipe.eval
    # The magnitude and severity flags only reach their own policy.
    if flags["auto_augment"] not in ("ra", "augmix"):
        assert A.reference_recipe(reference_args(
            ra_magnitude=20, augmix_severity=8, **flags)) == recipe


def test_reference_recipe_sizes_and_interpolation():
    recipe = A.reference_recipe(reference_args(
        auto_augment="ta_wide", train_crop_size=176, val_resize_size=232,
        val_crop_size=224, interpolation="bicubic"))
    assert (recipe.train["size"], recipe.train["interpolation"]) == (
        176, "bicubic")
    assert (recipe.eval["size"], recipe.eval["resize_shorter"],
            recipe.eval["interpolation"]) == (224, 232, "bicubic")


def test_reference_recipe_covers_the_batch_level_flags():
    recipe = A.reference_recipe(reference_args(
        random_erase=0.1, mixup_alpha=0.2, cutmix_alpha=1.0,
        label_smoothing=0.1), num_classes=1000)
    assert recipe.train["erasing"] == A.RandomErasing(p=0.1)
    assert recipe.train["mix"] == A.MixupCutmix(
        mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.1,
        num_classes=1000)
    assert str(recipe.train["mix"]) == (
        "mix { mixup_alpha: 0.2 cutmix_alpha: 1 label_smoothing: 0.1 "
        "num_classes: 1000 }")
    assert len(recipe.notes) == 1
    assert "without label_smoothing" in recipe.notes[0]
    with pytest.raises(ValueError, match="num_classes"):
        A.reference_recipe(reference_args(mixup_alpha=0.2))
    # Smoothing alone stays with the loss, as in the reference.
    alone = A.reference_recipe(reference_args(label_smoothing=0.1))
    assert "mix" not in alone.train
    assert "CrossEntropyLoss(label_smoothing=0.1)" in alone.notes[0]
    # --ra-sampler --ra-reps: repeated augmentation; --ra-reps alone is
    # ignored, as in the reference.
    assert A.reference_recipe(reference_args(
        ra_sampler=True, ra_reps=4)).train["repeats"] == 4
    assert A.reference_recipe(reference_args(
        ra_sampler=True)).train["repeats"] == 3
    assert "repeats" not in A.reference_recipe(
        reference_args(ra_reps=4)).train
    with pytest.raises(ValueError, match="ra_reps"):
        A.reference_recipe(reference_args(ra_sampler=True, ra_reps=17))


@pytest.mark.parametrize("flags, message", [
    (dict(auto_augment="autoaugment"), "auto_augment must be one of ta_wide"),
    (dict(interpolation="nearest"), "bilinear or bicubic, not 'nearest'"),
    (dict(auto_augment="ra", ra_magnitude=31), "ra_magnitude must be 0..30"),
    (dict(auto_augment="augmix", augmix_severity=0),
     "augmix_severity must be 1..10"),
])
def test_reference_recipe_errors(flags, message):
    with pytest.raises(ValueError, match=message):
        A.reference_recipe(reference_args(**flags))


# -- The plans the native side builds --------------------------------------

def pipeline_tail(plan):
    """The plan's pipeline from its interpolation on (text format)."""
    lines = plan.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith("  interpolation:") or
                  line.startswith("  augment {")), len(lines))
    end = max(i for i, line in enumerate(lines) if line == "}")
    return "\n".join(lines[start:end])


def test_loader_args_build_the_plan_and_refuse_bad_text():
    args = _native.LoaderArgs(
        endpoint="127.0.0.1:1", dataset="tiny", batch_size=8,
        interpolation="bicubic",
        augment=A.to_text([A.RandAugment(magnitude_std=0.5,
                                         interpolation="bilinear")]))
    assert pipeline_tail(args.plan()) == (
        "  interpolation: INTERPOLATION_BICUBIC\n"
        "  augment {\n"
        "    rand_augment {\n"
        "      magnitude_std: 0.5\n"
        "      interpolation: INTERPOLATION_BILINEAR\n"
        "    }\n"
        "  }")
    # Bilinear is the crop's default: the plan is an older client's.
    assert "interpolation" not in _native.LoaderArgs(dataset="d").plan()
    for options, message in [
            (dict(interpolation="nearest"),
             "interpolation must be bilinear or bicubic"),
            (dict(augment="augment { rand_augment { num_op: 3 } }"),
             "augment: line 1 column .*num_op"),
            (dict(augment="train { size: 8 }"),
             "only `augment { ... }` entries")]:
        with pytest.raises(ValueError, match=message):
            _native.LoaderArgs(dataset="d", **options).plan()
        with pytest.raises(ValueError, match=message):
            _native.NativeLoader(_native.LoaderArgs(
                endpoint="127.0.0.1:1", dataset="d", batch_size=8, **options))


@pytest.mark.parametrize("policy", A.REFERENCE_POLICIES)
def test_batchd_client_flags_make_the_recipes_plan(binaries, policy):
    """--auto_augment and --interpolation write the same entries as
    reference_recipe, so a CLI job and a Python job share one plan."""
    flags = reference_args(auto_augment=policy, interpolation="bicubic",
                           ra_magnitude=12 if policy == "ra" else 9,
                           augmix_severity=5 if policy == "augmix" else 3)
    recipe = A.reference_recipe(flags)
    python_plan = _native.LoaderArgs(
        dataset="tiny", interpolation=recipe.train["interpolation"],
        augment=A.to_text(recipe.train["augment"])).plan()
    command = [binaries["client"], "--dataset=tiny", "--print_plan",
               f"--auto_augment={policy}", "--interpolation=bicubic"]
    if policy == "ra":
        command.append("--ra_magnitude=12")
    if policy == "augmix":
        command.append("--augmix_severity=5")
    cli_plan = subprocess.run(command, check=True, capture_output=True,
                              text=True).stdout
    assert pipeline_tail(cli_plan) == pipeline_tail(python_plan)
    assert "augment {" in pipeline_tail(cli_plan)


def test_batchd_client_refuses_bad_augment_flags(binaries):
    for flags, message in [
            (["--auto_augment=rand"], "--auto_augment must be ta_wide"),
            (["--interpolation=nearest"], "--interpolation must be bilinear"),
            (["--ra_magnitude=5"], "--ra_magnitude applies to "
             "auto_augment=ra only"),
            (["--augment=augment { blur {} }"], "--augment: line 1 column")]:
        done = subprocess.run([binaries["client"], "--dataset=tiny",
                               "--print_plan"] + flags, capture_output=True,
                              text=True)
        assert done.returncode == 1
        assert message in done.stderr


def test_loader_with_augmentation_streams(daemon):
    ops = [A.TrivialAugmentWide(), A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
           A.RandomGrayscale(0.2), A.GaussianBlur(5, p=0.5)]
    with batchd.Loader(daemon.endpoint, "tiny", 8, size=32, seed=3, rank=0,
                       world_size=1, interpolation="bicubic",
                       augment=ops) as loader:
        images, labels = next(iter(loader))
        assert images.shape == (8, 3, 32, 32)
        assert images.dtype == torch.uint8 and labels.shape == (8,)
    recipe = A.reference_recipe(reference_args(
        auto_augment="ra", train_crop_size=32, val_resize_size=40,
        val_crop_size=32))
    with batchd.Loader(daemon.endpoint, "tiny", 8, rank=0, world_size=1,
                       **recipe.train) as loader:
        images, _ = next(iter(loader))
        assert images.shape == (8, 3, 32, 32)
        assert images.dtype == torch.float32
    with batchd.Loader(daemon.endpoint, "tiny", 8, rank=0, world_size=1,
                       shuffle=False, **recipe.eval) as loader:
        images, _ = next(iter(loader))
        assert images.shape == (8, 3, 32, 32)
    with pytest.raises(ValueError, match="takes batchd.augment ops"):
        batchd.Loader(daemon.endpoint, "tiny", 8, augment=["random_invert"])


# -- Elastic resume --------------------------------------------------------

def epoch_samples(loader, limit=None):
    """[(sample index, image bytes)] of the batches `loader` yields, in
    order, stopping after `limit` batches when given."""
    out = []
    for step, (images, _) in enumerate(loader):
        rows = images.numpy().reshape(len(loader.sample_indices), -1)
        out += [(index, row.tobytes())
                for index, row in zip(loader.sample_indices, rows)]
        if limit is not None and step + 1 == limit:
            break
    return out


def test_elastic_resume_keeps_the_augmented_bytes(daemon):
    """Two ranks consume part of an epoch with augmentation on; one rank
    resumes the merged state and finishes it. Each sample's ops are drawn
    from (plan, epoch, sample), not from the world that builds it: every
    sample arrives once, with the bytes an uninterrupted one-rank epoch
    gives it."""
    ops = [A.RandAugment(num_ops=2, magnitude=12, magnitude_std=0.5),
           A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
           A.RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1))]
    kwargs = dict(size=16, seed=19, augment=ops)
    epoch, batch, steps, samples = 1, 4, 2, 48  # conftest's `tiny`
    with batchd.Loader(daemon.endpoint, "tiny", batch, rank=0, world_size=1,
                       **kwargs) as loader:
        loader.set_epoch(epoch)
        reference = epoch_samples(loader)
    assert sorted(i for i, _ in reference) == list(range(samples))
    with batchd.Loader(daemon.endpoint, "tiny", batch, rank=0, world_size=1,
                       size=16, seed=19) as loader:
        loader.set_epoch(epoch)
        plain = dict(epoch_samples(loader))
    assert all(plain[i] != image for i, image in reference)

    first, states = [], []
    for rank in range(2):
        with batchd.Loader(daemon.endpoint, "tiny", batch, rank=rank,
                           world_size=2, **kwargs) as loader:
            loader.set_epoch(epoch)
            first += epoch_samples(loader, limit=steps)
            states.append(loader.state_dict())
    merged = batchd.merge_states(states)
    resume_at = steps * batch * 2
    assert merged["epoch"] == epoch and merged["position"] == resume_at
    with batchd.Loader(daemon.endpoint, "tiny", batch, rank=0, world_size=1,
                       **kwargs) as loader:
        assert loader.load_state_dict(merged) == (
            f"resuming epoch {epoch} at sample {resume_at} of {samples} on "
            "1 ranks, was 2")
        second = epoch_samples(loader)

    assert len(first) == resume_at
    assert len(second) == samples - resume_at
    indices = [index for index, _ in first + second]
    assert sorted(indices) == list(range(samples))
    assert (collections.Counter(second) ==
            collections.Counter(reference[resume_at:]))
    assert (collections.Counter(first) ==
            collections.Counter(reference[:resume_at]))
