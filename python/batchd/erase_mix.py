"""RandomErasing and MixUp/CutMix: the trainer-side half of torchvision's
classification recipe, as plan fields (``Pipeline.erasing``,
``Pipeline.mix``). Re-exported as ``batchd.augment.RandomErasing`` and
``batchd.augment.MixupCutmix``.

The daemon draws each sample's rectangle and each batch's mix (pure
functions of plan, epoch and batch index) and sends them with the batch;
the client applies them after normalisation, on the GPU or the CPU, and
yields float soft labels ``[B, num_classes]`` with a mix::

    from batchd import augment as A
    loader = batchd.Loader(endpoint, "imagenet", 128,
                           normalize=batchd.IMAGENET_NORMALIZE,
                           erasing=A.RandomErasing(0.1),
                           mix=A.MixupCutmix(mixup_alpha=0.2, cutmix_alpha=1.0,
                                             label_smoothing=0.1,
                                             num_classes=1000))
    for images, soft_labels in loader: ...

``str(x)`` is the field in protobuf text format (what ``Loader`` adds to
the plan and ``batchd-client --augment`` takes).
"""
from . import augment as _augment

_float_text = _augment._float_text


class _Field:
    """One plan field written as text; equal when they write the same."""

    field = None

    def __init__(self):
        self._fields = []

    def _set(self, name, text):
        self._fields.append((name, text))

    def __str__(self):
        body = " ".join(f"{name}: {text}" for name, text in self._fields)
        return f"{self.field} {{ {body + ' ' if body else ''}}}"

    def __eq__(self, other):
        return type(self) is type(other) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __repr__(self):
        return f"{type(self).__name__}<{self}>"


class RandomErasing(_Field):
    """torchvision.transforms.RandomErasing(p, scale, ratio, value) on the
    normalised tensor (0.14's get_params: area fraction from
    U(scale), aspect ratio height/width log-uniform in ratio, 10 tries).

    Args:
      p: probability each sample is erased (0.5).
      scale: (min, max) area fraction, 0 < min <= max <= 1
        ((0.02, 0.33)).
      ratio: (min, max) aspect ratio, 0 < min <= max ((0.3, 3.3)).
      value: 0 (default) or ``"random"`` (per-pixel Normal(0, 1) from a
        counter-based generator keyed by seed, epoch and sample: the same
        values on CPU and GPU). torchvision's other values (a per-channel
        tuple) are not offered.
    """

    field = "erasing"

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0):
        super().__init__()
        p = _augment._probability(p)
        scale = _augment._pair(scale, "scale")
        ratio = _augment._pair(ratio, "ratio")
        if not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"scale must be (min, max) with 0 < min <= max "
                             f"<= 1, not {scale!r}")
        if not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"ratio must be (min, max) with 0 < min <= max, "
                             f"not {ratio!r}")
        if value not in (0, "random"):
            raise ValueError(f"value must be 0 or 'random', not {value!r}")
        self.p, self.scale, self.ratio, self.value = p, scale, ratio, value
        if p != 0.5:
            self._set("p", _float_text(p))
        for name, got, default in (("scale_min", scale[0], 0.02),
                                   ("scale_max", scale[1], 0.33),
                                   ("ratio_min", ratio[0], 0.3),
                                   ("ratio_max", ratio[1], 3.3)):
            if got != default:
                self._set(name, _float_text(got))
        if value == "random":
            self._set("random_value", "true")


class MixupCutmix(_Field):
    """MixUp and CutMix as torchvision's classification references
    (RandomMixup, RandomCutmix, chosen by RandomChoice) and timm's Mixup:
    per batch, with probability `prob`, CutMix with probability
    `switch_prob` (when both alphas are on) else MixUp; lambda from
    Beta(alpha, alpha); the batch mixed with itself rolled by one. Labels
    become float ``[B, num_classes]``: one-hot, smoothed by
    `label_smoothing`, mixed with weight lambda.

    Args:
      mixup_alpha, cutmix_alpha: Beta parameters, > 0 (at most 100), or
        0/None for off; at least one on.
      switch_prob: CutMix's share when both are on (0.5).
      label_smoothing: 0 <= e < 1. With it here, give the loss none.
      num_classes: columns of the soft labels (required).
      prob: probability a batch is mixed at all (1.0).
    """

    field = "mix"

    def __init__(self, mixup_alpha=0.0, cutmix_alpha=0.0, switch_prob=0.5,
                 label_smoothing=0.0, num_classes=None, prob=1.0):
        super().__init__()
        mixup_alpha = _augment._number(mixup_alpha or 0.0, "mixup_alpha",
                                       0.0, 100.0)
        cutmix_alpha = _augment._number(cutmix_alpha or 0.0, "cutmix_alpha",
                                        0.0, 100.0)
        if mixup_alpha == 0 and cutmix_alpha == 0:
            raise ValueError("MixupCutmix needs mixup_alpha > 0 or "
                             "cutmix_alpha > 0")
        switch_prob = _augment._probability(switch_prob, "switch_prob")
        prob = _augment._probability(prob, "prob")
        label_smoothing = _augment._number(label_smoothing, "label_smoothing",
                                           0.0, 1.0)
        if label_smoothing >= 1:
            raise ValueError("label_smoothing must be in [0, 1)")
        if num_classes is None:
            raise ValueError("num_classes is required: the soft labels have "
                             "one column per class")
        num_classes = _augment._integer(num_classes, "num_classes", 1,
                                        2**32 - 1)
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha
        self.switch_prob, self.label_smoothing = switch_prob, label_smoothing
        self.num_classes, self.prob = num_classes, prob
        if mixup_alpha > 0:
            self._set("mixup_alpha", _float_text(mixup_alpha))
        if cutmix_alpha > 0:
            self._set("cutmix_alpha", _float_text(cutmix_alpha))
        if switch_prob != 0.5:
            self._set("switch_prob", _float_text(switch_prob))
        if label_smoothing != 0:
            self._set("label_smoothing", _float_text(label_smoothing))
        self._set("num_classes", str(num_classes))
        if prob != 1:
            self._set("prob", _float_text(prob))


def plan_text(erasing, mix):
    """The text `erasing` and `mix` (each None or an instance) add to the
    plan's augment text. TypeError for anything else."""
    lines = []
    for value, kind, name in ((erasing, RandomErasing, "erasing"),
                              (mix, MixupCutmix, "mix")):
        if value is None:
            continue
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a batchd.augment."
                            f"{kind.__name__}, not {value!r}")
        lines.append(str(value))
    return "\n".join(lines)
