"""batchd.augment: torchvision's augmentation policies and ops, run by the
daemon.

Each class is named and takes its arguments as its ``torchvision.transforms``
counterpart (0.14) does, checks them in Python (ValueError naming the
argument), and stands for one entry of the plan's ``Pipeline.augment``
(proto/batchd/v1/augment.proto): ``str(op)`` is that entry in protobuf text
format. The daemon applies the entries in order after the crop and flip,
drawing every random parameter from the sample's own generator, so a batch
stays a pure function of (plan, epoch, batch index)::

    from batchd import augment as A
    loader = batchd.Loader("localhost:7070", "imagenet", 256, size=176,
                           augment=[A.TrivialAugmentWide(
                               interpolation="bilinear")])
    str(A.RandomGrayscale(p=0.2))
    # 'augment { random_grayscale { p: 0.2 } }'

Entries list only the fields that differ from torchvision's defaults, so
equal ops write equal plans (and a daemon shares their batches).
:func:`reference_recipe` turns torchvision's classification-reference flags
(``--auto-augment``, ``--train-crop-size``, ...) into Loader keyword
arguments. docs/augment.md lists every op, its parameters and the recipes.
"""
import collections
import collections.abc
import math
import numbers
import struct

__all__ = ["Op", "TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix",
           "ColorJitter", "RandomGrayscale", "GaussianBlur", "RandomSolarize",
           "RandomPosterize", "RandomAutocontrast", "RandomEqualize",
           "RandomInvert", "RandomVerticalFlip", "RandomRotation",
           "RandomAffine", "RandomErasing", "MixupCutmix", "ViewGroup",
           "Recipe",
           "reference_recipe", "REFERENCE_POLICIES", "to_text"]


# -- Argument checks (torchvision's argument forms) ---------------------------

def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _number(value, name, low=-math.inf, high=math.inf):
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], not {value!r}")
    return float(value)


def _integer(value, name, low, high):
    if (not _is_number(value) or not math.isfinite(value) or
            value != int(value)):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be {low}..{high}, not {value!r}")
    return int(value)


def _probability(value, name="p"):
    return _number(value, name, 0.0, 1.0)


def _pair(value, name):
    if (isinstance(value, (str, bytes)) or
            not isinstance(value, collections.abc.Sequence) or
            len(value) != 2):
        raise ValueError(f"{name} must be a number or a (min, max) pair, "
                         f"not {value!r}")
    return (_number(value[0], name), _number(value[1], name))


def _symmetric_range(value, name, bound):
    """torchvision's angle argument: d >= 0 for (-d, d), or (min, max);
    each in [-bound, bound], min <= max."""
    if _is_number(value):
        d = _number(value, name, 0.0, bound)
        return (-d, d)
    low, high = _pair(value, name)
    if not -bound <= low <= high <= bound:
        raise ValueError(f"{name} must be (min, max) with -{bound} <= min <= "
                         f"max <= {bound}, not {value!r}")
    return (low, high)


_OP_INTERPOLATIONS = ("nearest", "bilinear")


def _interpolation_name(value):
    # torchvision.transforms.InterpolationMode is a str Enum ("bilinear").
    name = getattr(value, "value", value)
    return name.lower() if isinstance(name, str) else name


def _op_interpolation(value):
    name = _interpolation_name(value)
    if name not in _OP_INTERPOLATIONS:
        raise ValueError(f"interpolation must be 'nearest' or 'bilinear' "
                         f"(the ops' geometry has no other), not {value!r}")
    return name


def _fill(value):
    """None, a number, or one or three numbers: RGB 0..255; black is []."""
    if value is None:
        return []
    values = [value] if _is_number(value) else value
    if (isinstance(values, (str, bytes)) or
            not isinstance(values, collections.abc.Sequence) or
            len(values) not in (1, 3)):
        raise ValueError(f"fill must be a number or 1 or 3 numbers, not "
                         f"{value!r}")
    values = [_integer(v, "fill", 0, 255) for v in values]
    if len(values) == 1:
        values *= 3
    return [] if values == [0, 0, 0] else values


def _float_text(value):
    """The shortest decimal that is `value` as a float field (32 bits)
    holds it: 0.4 for 1.4 - 1.0, 30 for 30.0."""
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    single = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == single:
            return text
    return repr(float(value))


# -- The ops -----------------------------------------------------------------

class Op:
    """One entry of ``Pipeline.augment``. ``str(op)`` is its text format,
    ``augment { <field> { ... } }``; ops compare equal when they write the
    same entry."""

    #: The entry's field of the ``Augment`` message (augment.proto).
    field = None

    def __init__(self, **arguments):
        self._arguments = arguments
        self._fields = []  # (name, text) of the fields that are set

    def _set(self, name, text):
        self._fields.append((name, text))

    def _set_float(self, name, value, default):
        if value != default:
            self._set(name, _float_text(value))

    def _set_int(self, name, value, default):
        if value != default:
            self._set(name, str(value))

    def _set_interpolation(self, name, default="nearest"):
        if name != default:
            self._set("interpolation", "INTERPOLATION_" + name.upper())

    def _set_fill(self, fill):
        for value in fill:
            self._set("fill", str(value))

    def __str__(self):
        body = " ".join(f"{name}: {text}" for name, text in self._fields)
        return f"augment {{ {self.field} {{ {body + ' ' if body else ''}}} }}"

    def __repr__(self):
        arguments = ", ".join(f"{k}={v!r}" for k, v in self._arguments.items())
        return f"{type(self).__name__}({arguments})"

    def __eq__(self, other):
        return isinstance(other, Op) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class TrivialAugmentWide(Op):
    """torchvision.transforms.TrivialAugmentWide: one op of the wide set at
    a uniformly drawn magnitude bin. ``num_magnitude_bins`` 2..1024."""

    field = "trivial_augment_wide"

    def __init__(self, num_magnitude_bins=31, interpolation="nearest",
                 fill=None):
        super().__init__(num_magnitude_bins=num_magnitude_bins,
                         interpolation=interpolation, fill=fill)
        bins = _integer(num_magnitude_bins, "num_magnitude_bins", 2, 1024)
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        self._set_int("num_magnitude_bins", bins, 31)
        self._set_interpolation(interpolation)
        self._set_fill(fill)


class RandAugment(Op):
    """torchvision.transforms.RandAugment: ``num_ops`` ops (0..16) at
    ``magnitude`` (0..num_magnitude_bins - 1). ``magnitude_std`` > 0 is
    timm's magnitude noise (``rand-m9-mstd0.5``): each op's magnitude is
    drawn from Normal(magnitude, magnitude_std), clipped to the bins."""

    field = "rand_augment"

    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31,
                 magnitude_std=0.0, interpolation="nearest", fill=None):
        super().__init__(num_ops=num_ops, magnitude=magnitude,
                         num_magnitude_bins=num_magnitude_bins,
                         magnitude_std=magnitude_std,
                         interpolation=interpolation, fill=fill)
        num_ops = _integer(num_ops, "num_ops", 0, 16)
        bins = _integer(num_magnitude_bins, "num_magnitude_bins", 2, 1024)
        magnitude = _integer(magnitude, "magnitude", 0, bins - 1)
        magnitude_std = _number(magnitude_std, "magnitude_std", 0.0, 100.0)
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        self._set_int("num_ops", num_ops, 2)
        self._set_int("magnitude", magnitude, 9)
        self._set_int("num_magnitude_bins", bins, 31)
        self._set_float("magnitude_std", magnitude_std, 0.0)
        self._set_interpolation(interpolation)
        self._set_fill(fill)


_AUTO_AUGMENT_POLICIES = {"imagenet": None, "cifar10": "POLICY_CIFAR10",
                          "svhn": "POLICY_SVHN"}


class AutoAugment(Op):
    """torchvision.transforms.AutoAugment: one of the policy's 25
    sub-policies. ``policy``: "imagenet", "cifar10", "svhn" (or
    torchvision's AutoAugmentPolicy)."""

    field = "auto_augment"

    def __init__(self, policy="imagenet", interpolation="nearest", fill=None):
        super().__init__(policy=policy, interpolation=interpolation,
                         fill=fill)
        name = getattr(policy, "value", policy)
        if name not in _AUTO_AUGMENT_POLICIES:
            raise ValueError(f"policy must be 'imagenet', 'cifar10' or "
                             f"'svhn', not {policy!r}")
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        if _AUTO_AUGMENT_POLICIES[name] is not None:
            self._set("policy", _AUTO_AUGMENT_POLICIES[name])
        self._set_interpolation(interpolation)
        self._set_fill(fill)


class AugMix(Op):
    """torchvision.transforms.AugMix: ``mixture_width`` chains (1..16) of
    ``chain_depth`` ops (1..16; -1 draws 1..3 per chain) at ``severity``
    (1..10), mixed with Dirichlet(alpha) weights and then with the image
    (Beta(alpha, alpha)); ``all_ops=False`` leaves out the ops that overlap
    ImageNet-C. Bilinear by default, as torchvision's."""

    field = "aug_mix"

    def __init__(self, severity=3, mixture_width=3, chain_depth=-1, alpha=1.0,
                 all_ops=True, interpolation="bilinear", fill=None):
        super().__init__(severity=severity, mixture_width=mixture_width,
                         chain_depth=chain_depth, alpha=alpha,
                         all_ops=all_ops, interpolation=interpolation,
                         fill=fill)
        severity = _integer(severity, "severity", 1, 10)
        mixture_width = _integer(mixture_width, "mixture_width", 1, 16)
        if chain_depth != -1:
            chain_depth = _integer(chain_depth, "chain_depth (or -1)", 1, 16)
        alpha = _number(alpha, "alpha", 0.0, 100.0)
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, not {alpha!r}")
        if not isinstance(all_ops, bool):
            raise ValueError(f"all_ops must be True or False, not {all_ops!r}")
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        self._set_int("severity", severity, 3)
        self._set_int("mixture_width", mixture_width, 3)
        self._set_int("chain_depth", chain_depth, -1)
        self._set_float("alpha", alpha, 1.0)
        if not all_ops:
            self._set("all_ops", "false")
        # Always written: the wire's unset interpolation is nearest, and
        # torchvision's AugMix is bilinear unless told otherwise.
        self._set("interpolation", "INTERPOLATION_" + interpolation.upper())
        self._set_fill(fill)


def _jitter_factor(value, name):
    """ColorJitter's brightness/contrast/saturation: v >= 0, or the range
    (max(0, 1 - v), 1 + v) torchvision makes of it."""
    if _is_number(value):
        return _number(value, name, 0.0)
    low, high = _pair(value, name)
    v = high - 1.0
    if v < 0 or not math.isclose(low, max(0.0, 1.0 - v), abs_tol=1e-6):
        raise ValueError(
            f"{name}: batchd draws the factor from (max(0, 1 - v), 1 + v); "
            f"{value!r} is not of that form (give v, or such a pair)")
    return v


def _jitter_hue(value):
    if _is_number(value):
        return _number(value, "hue", 0.0, 0.5)
    low, high = _pair(value, "hue")
    if not (0.0 <= high <= 0.5 and math.isclose(low, -high, abs_tol=1e-6)):
        raise ValueError(f"hue: batchd draws from (-v, v) with 0 <= v <= "
                         f"0.5; {value!r} is not of that form")
    return high


class ColorJitter(Op):
    """torchvision.transforms.ColorJitter, applied with probability ``p``
    (as RandomApply([ColorJitter(...)], p) does). brightness, contrast and
    saturation: v >= 0 draws the factor from (max(0, 1 - v), 1 + v); hue:
    v in 0..0.5 draws from (-v, v); torchvision's (min, max) form is taken
    when it is such a range. 0 turns a factor off."""

    field = "color_jitter"

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0, p=1.0):
        super().__init__(brightness=brightness, contrast=contrast,
                         saturation=saturation, hue=hue, p=p)
        brightness = _jitter_factor(brightness, "brightness")
        contrast = _jitter_factor(contrast, "contrast")
        saturation = _jitter_factor(saturation, "saturation")
        hue = _jitter_hue(hue)
        p = _probability(p)
        self._set_float("brightness", brightness, 0.0)
        self._set_float("contrast", contrast, 0.0)
        self._set_float("saturation", saturation, 0.0)
        self._set_float("hue", hue, 0.0)
        self._set_float("p", p, 1.0)


# Stands for an argument left out (None is a wrong value, refused).
_DEFAULT = object()


class _Probability(Op):
    """An op whose only argument is its probability, ``p`` (``default_p``
    when not given)."""

    default_p = 0.5

    def __init__(self, p=_DEFAULT):
        p = self.default_p if p is _DEFAULT else p
        super().__init__(p=p)
        self._set_float("p", _probability(p), self.default_p)


class RandomGrayscale(_Probability):
    """torchvision.transforms.RandomGrayscale (ITU-R 601-2 luma, as three
    equal channels) with probability ``p`` (default 0.1)."""

    field = "random_grayscale"
    default_p = 0.1


class GaussianBlur(Op):
    """torchvision.transforms.GaussianBlur with probability ``p``.
    ``kernel_size``: odd, 1..255, or (width, height); ``sigma``: > 0, or
    (min, max) drawn uniformly, each at most 100."""

    field = "gaussian_blur"

    def __init__(self, kernel_size, sigma=(0.1, 2.0), p=1.0):
        super().__init__(kernel_size=kernel_size, sigma=sigma, p=p)
        if _is_number(kernel_size):
            sizes = (kernel_size, kernel_size)
        elif (isinstance(kernel_size, collections.abc.Sequence) and
              not isinstance(kernel_size, (str, bytes)) and
              len(kernel_size) in (1, 2)):
            sizes = tuple(kernel_size) * (3 - len(kernel_size))
        else:
            raise ValueError(f"kernel_size must be an odd number or a "
                             f"(width, height) pair, not {kernel_size!r}")
        width, height = (_integer(s, "kernel_size", 1, 255) for s in sizes)
        if width % 2 == 0 or height % 2 == 0:
            raise ValueError(f"kernel_size must be odd, not {kernel_size!r}")
        if _is_number(sigma):
            low = high = _number(sigma, "sigma", 0.0, 100.0)
        else:
            low, high = _pair(sigma, "sigma")
        if not 0.0 < low <= high <= 100.0:
            raise ValueError(f"sigma must be > 0, or (min, max) with 0 < min "
                             f"<= max <= 100, not {sigma!r}")
        p = _probability(p)
        self._set("kernel_size", str(width))
        self._set_int("kernel_size_y", height, width)
        self._set_float("sigma_min", low, 0.1)
        self._set_float("sigma_max", high, 2.0)
        self._set_float("p", p, 1.0)


class RandomSolarize(Op):
    """torchvision.transforms.RandomSolarize: inverts the values >=
    ``threshold`` (0..256) with probability ``p``."""

    field = "random_solarize"

    def __init__(self, threshold, p=0.5):
        super().__init__(threshold=threshold, p=p)
        threshold = _number(threshold, "threshold", 0.0, 256.0)
        p = _probability(p)
        self._set_float("threshold", threshold, 128.0)
        self._set_float("p", p, 0.5)


class RandomPosterize(Op):
    """torchvision.transforms.RandomPosterize: keeps the top ``bits`` (0..8)
    bits of each value, with probability ``p``."""

    field = "random_posterize"

    def __init__(self, bits, p=0.5):
        super().__init__(bits=bits, p=p)
        bits = _integer(bits, "bits", 0, 8)
        p = _probability(p)
        self._set_int("bits", bits, 4)
        self._set_float("p", p, 0.5)


class RandomAutocontrast(_Probability):
    """torchvision.transforms.RandomAutocontrast with probability ``p``."""

    field = "random_autocontrast"


class RandomEqualize(_Probability):
    """torchvision.transforms.RandomEqualize with probability ``p``."""

    field = "random_equalize"


class RandomInvert(_Probability):
    """torchvision.transforms.RandomInvert with probability ``p``."""

    field = "random_invert"


class RandomVerticalFlip(_Probability):
    """torchvision.transforms.RandomVerticalFlip with probability ``p``."""

    field = "random_vertical_flip"


def _no_expand_or_center(expand, center):
    if expand:
        raise ValueError("expand=True is not supported: the output keeps "
                         "the crop's size")
    if center is not None:
        raise ValueError("center is not supported: ops turn about the "
                         "image's centre")


class RandomRotation(Op):
    """torchvision.transforms.RandomRotation about the centre, without
    expand. ``degrees``: d >= 0 for (-d, d), or (min, max), within
    -360..360."""

    field = "random_rotation"

    def __init__(self, degrees, interpolation="nearest", expand=False,
                 center=None, fill=None):
        super().__init__(degrees=degrees, interpolation=interpolation,
                         fill=fill)
        _no_expand_or_center(expand, center)
        low, high = _symmetric_range(degrees, "degrees", 360.0)
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        self._set_float("degrees_min", low, 0.0)
        self._set_float("degrees_max", high, 0.0)
        self._set_interpolation(interpolation)
        self._set_fill(fill)


class RandomAffine(Op):
    """torchvision.transforms.RandomAffine about the centre.
    ``degrees`` as RandomRotation's; ``translate``: (x, y) fractions of the
    width and height, 0..1; ``scale``: (min, max), 0 < min <= max;
    ``shear``: s >= 0 for x in (-s, s), (min, max) for x, or (x min, x max,
    y min, y max), within -180..180."""

    field = "random_affine"

    def __init__(self, degrees, translate=None, scale=None, shear=None,
                 interpolation="nearest", fill=None, center=None):
        super().__init__(degrees=degrees, translate=translate, scale=scale,
                         shear=shear, interpolation=interpolation, fill=fill)
        _no_expand_or_center(False, center)
        low, high = _symmetric_range(degrees, "degrees", 360.0)
        tx = ty = 0.0
        if translate is not None:
            tx, ty = _pair(translate, "translate")
            if not (0.0 <= tx <= 1.0 and 0.0 <= ty <= 1.0):
                raise ValueError(f"translate values must be in [0, 1], not "
                                 f"{translate!r}")
        scale_range = None
        if scale is not None:
            scale_range = _pair(scale, "scale")
            if not 0.0 < scale_range[0] <= scale_range[1]:
                raise ValueError(f"scale must be (min, max) with 0 < min <= "
                                 f"max, not {scale!r}")
        shear_x = shear_y = (0.0, 0.0)
        if shear is not None:
            if (_is_number(shear) or not isinstance(
                    shear, collections.abc.Sequence) or len(shear) != 4):
                shear_x = _symmetric_range(shear, "shear", 180.0)
            else:
                shear_x = _symmetric_range(tuple(shear[:2]), "shear", 180.0)
                shear_y = _symmetric_range(tuple(shear[2:]), "shear", 180.0)
        interpolation = _op_interpolation(interpolation)
        fill = _fill(fill)
        self._set_float("degrees_min", low, 0.0)
        self._set_float("degrees_max", high, 0.0)
        self._set_float("translate_x", tx, 0.0)
        self._set_float("translate_y", ty, 0.0)
        # Unset is 1: no scaling.
        if scale_range is not None and scale_range != (1.0, 1.0):
            self._set("scale_min", _float_text(scale_range[0]))
            self._set("scale_max", _float_text(scale_range[1]))
        self._set_float("shear_x_min", shear_x[0], 0.0)
        self._set_float("shear_x_max", shear_x[1], 0.0)
        self._set_float("shear_y_min", shear_y[0], 0.0)
        self._set_float("shear_y_max", shear_y[1], 0.0)
        self._set_interpolation(interpolation)
        self._set_fill(fill)


def to_text(ops):
    """The ``Pipeline.augment`` entries of `ops` (a sequence of :class:`Op`)
    in text format, one per line: what ``Loader(augment=ops)`` sends and
    what ``batchd-client --augment`` takes. A str is returned as it is."""
    if isinstance(ops, str):
        return ops
    if isinstance(ops, Op):
        raise ValueError("augment must be a list of ops, not one op: "
                         "augment=[op]")
    lines = []
    for op in ops:
        if not isinstance(op, Op):
            raise ValueError(f"augment takes batchd.augment ops, not "
                             f"{op!r}")
        lines.append(str(op))
    return "\n".join(lines)


# -- torchvision's classification reference ----------------------------------

#: ``--auto-augment`` values of torchvision's classification reference.
REFERENCE_POLICIES = ("ta_wide", "ra", "augmix", "imagenet", "cifar10",
                      "svhn")


class Recipe(collections.namedtuple("Recipe", ["train", "eval", "notes"])):
    """Loader keyword arguments for the reference's training and
    evaluation sets (``train``, ``eval``: dicts), and ``notes``: what the
    recipe leaves to the training script (one line each)."""

    __slots__ = ()


def _reference_policy(name, interpolation, ra_magnitude, augmix_severity):
    if name == "ta_wide":
        return TrivialAugmentWide(interpolation=interpolation)
    if name == "ra":
        return RandAugment(magnitude=ra_magnitude, interpolation=interpolation)
    if name == "augmix":
        return AugMix(severity=augmix_severity, interpolation=interpolation)
    if name in _AUTO_AUGMENT_POLICIES:
        return AutoAugment(policy=name, interpolation=interpolation)
    raise ValueError(f"auto_augment must be one of "
                     f"{', '.join(REFERENCE_POLICIES)} or None, not {name!r}")


def reference_recipe(args, num_classes=None):
    """torchvision's classification reference (references/classification,
    presets.ClassificationPresetTrain and ClassificationPresetEval, and
    train.py's batch-level flags) as Loader keyword arguments, from its
    parsed flags.

    `args` is the reference's ``argparse.Namespace`` (or a dict); it reads
    ``auto_augment`` (None, or one of :data:`REFERENCE_POLICIES`),
    ``ra_magnitude`` (9), ``augmix_severity`` (3), ``interpolation``
    ("bilinear" or "bicubic"), ``train_crop_size`` (224),
    ``val_resize_size`` (256), ``val_crop_size`` (224), ``random_erase``
    (0.0), ``mixup_alpha`` (0.0), ``cutmix_alpha`` (0.0),
    ``label_smoothing`` (0.0), ``ra_sampler`` (False) and ``ra_reps`` (3),
    each with the reference's default when
    missing. `num_classes` (the dataset's classes) is needed with
    ``mixup_alpha`` or ``cutmix_alpha``. Returns a :class:`Recipe`::

        recipe = batchd.augment.reference_recipe(args, num_classes=1000)
        train = batchd.Loader(endpoint, "imagenet-train", args.batch_size,
                              **recipe.train)
        val = batchd.Loader(endpoint, "imagenet-val", args.batch_size,
                            shuffle=False, **recipe.eval)

    Train: RandomResizedCrop(train_crop_size) with the interpolation, the
    flip (p 0.5), the policy, ImageNet's Normalize, then RandomErasing
    (``--random-erase``) and MixUp/CutMix (``--mixup-alpha``,
    ``--cutmix-alpha``, chosen with probability 1/2 each as the
    reference's RandomChoice) with ``--label-smoothing`` in the soft labels;
    ``--ra-sampler`` repeats each image ``--ra-reps`` times an epoch
    (``repeats``, torchvision's RASampler).
    Eval: Resize (val_resize_size) then CenterCrop(val_crop_size), the
    same interpolation and Normalize. The reference hands the crop's
    interpolation to the policy; batchd's ops are nearest or bilinear, so
    under "bicubic" the policy is bilinear (docs/augment.md). What the
    training script must still do is in ``notes``.
    """
    from .loader import IMAGENET_NORMALIZE

    if isinstance(args, collections.abc.Mapping):
        values = dict(args)
    else:
        values = vars(args)

    def get(name, default):
        value = values.get(name)
        return default if value is None else value

    interpolation = _interpolation_name(get("interpolation", "bilinear"))
    if interpolation not in ("bilinear", "bicubic"):
        raise ValueError(f"interpolation: batchd resizes the crop bilinear or "
                         f"bicubic, not {interpolation!r}")
    policy_interpolation = "bilinear"
    augment = []
    auto_augment = values.get("auto_augment")
    if auto_augment is not None:
        augment.append(_reference_policy(
            auto_augment, policy_interpolation,
            _integer(get("ra_magnitude", 9), "ra_magnitude", 0, 30),
            _integer(get("augmix_severity", 3), "augmix_severity", 1, 10)))
    train = {"mode": "train", "size": get("train_crop_size", 224),
             "interpolation": interpolation, "augment": augment,
             "normalize": IMAGENET_NORMALIZE}
    evaluation = {"mode": "eval", "size": get("val_crop_size", 224),
                  "resize_shorter": get("val_resize_size", 256),
                  "interpolation": interpolation,
                  "normalize": IMAGENET_NORMALIZE}
    notes = []
    random_erase = _probability(get("random_erase", 0.0), "random_erase")
    if random_erase > 0:
        train["erasing"] = RandomErasing(p=random_erase)
    mixup_alpha = _number(get("mixup_alpha", 0.0), "mixup_alpha", 0.0)
    cutmix_alpha = _number(get("cutmix_alpha", 0.0), "cutmix_alpha", 0.0)
    label_smoothing = _number(get("label_smoothing", 0.0), "label_smoothing",
                              0.0, 1.0)
    if mixup_alpha > 0 or cutmix_alpha > 0:
        if num_classes is None:
            raise ValueError("num_classes: the reference's --mixup-alpha and "
                             "--cutmix-alpha give soft labels of one column "
                             "per class; pass reference_recipe(args, "
                             "num_classes=...)")
        train["mix"] = MixupCutmix(mixup_alpha=mixup_alpha,
                                   cutmix_alpha=cutmix_alpha,
                                   label_smoothing=label_smoothing,
                                   num_classes=num_classes)
        notes.append("labels are soft [B, num_classes] (label smoothing "
                     "included): use CrossEntropyLoss() without "
                     "label_smoothing on the training set")
    elif label_smoothing > 0:
        notes.append(f"label_smoothing {label_smoothing}: give it to the loss "
                     f"(CrossEntropyLoss(label_smoothing="
                     f"{label_smoothing})), as the reference does")
    if get("ra_sampler", False):
        train["repeats"] = _integer(get("ra_reps", 3), "ra_reps", 1, 16)
    return Recipe(train, evaluation, tuple(notes))


# RandomErasing and MixUp/CutMix (erase_mix.py) and multi-view plans
# (views.py) live in their own modules, which use the checks above, and
# are re-exported here beside the ops they take. Loaded as a lone file
# (bench/augment.py reads the ops without the package) this module has the
# per-sample ops only.
if __package__:
    from .erase_mix import MixupCutmix, RandomErasing  # noqa: E402,F401
    from .views import ViewGroup  # noqa: E402,F401
