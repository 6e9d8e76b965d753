"""batchd.augment.ViewGroup: multi-view plans (``Plan.views``), decoded once
and cut into several views per sample, each with its own crop, flip and ops.

    from batchd import augment as A
    dino = [A.ViewGroup(count=2, size=224, scale=(0.4, 1.0)),
            A.ViewGroup(count=6, size=96, scale=(0.05, 0.4))]
    loader = batchd.Loader("localhost:7070", "imagenet", 64, views=dino)
    for views, labels in loader:   # views: 8 tensors, [64,3,224,224] x 2
        ...                        # then [64,3,96,96] x 6

``str(group)`` is the group's ``views { ... }`` entry in protobuf text
format (proto/batchd/v1/data.proto, ``ViewGroup``). docs/augment.md,
"Views", writes SimCLR and DINO out.
"""
from batchd import augment as _augment

#: The most views of a plan, over all its groups, and the most groups.
MAX_VIEWS = 16
MAX_GROUPS = 8


class ViewGroup:
    """`count` views of each sample, each a RandomResizedCrop(`size`,
    `scale`, `ratio`) and a flip with probability `flip`, resized with
    `interpolation` ("bilinear" or "bicubic"), then the `augment` ops."""

    def __init__(self, count, size, scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), flip=0.5,
                 interpolation="bilinear", augment=()):
        self.count = _augment._integer(count, "count", 1, MAX_VIEWS)
        self.size = _augment._integer(size, "size", 1, 4096)
        self.scale = _augment._pair(scale, "scale")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must be (min, max) with 0 < min <= max "
                             f"<= 1, not {scale!r}")
        self.ratio = _augment._pair(ratio, "ratio")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must be (min, max) with 0 < min <= max, "
                             f"not {ratio!r}")
        self.flip = _augment._probability(flip, "flip")
        name = _augment._interpolation_name(interpolation)
        if name not in ("bilinear", "bicubic"):
            raise ValueError(f"interpolation must be 'bilinear' or 'bicubic', "
                             f"not {interpolation!r}")
        self.interpolation = name
        self.augment = list(augment)
        self._augment_text = _augment.to_text(self.augment)

    def __str__(self):
        # Only what differs from the daemon's defaults (as the ops write
        # theirs): 4/3 as a float field is not the daemon's 4/3, and would
        # draw other crops than a one-view plan's.
        t = _augment._float_text
        crop = f"size: {self.size}"
        if self.scale != (0.08, 1.0):
            crop += (f" scale_min: {t(self.scale[0])} scale_max: "
                     f"{t(self.scale[1])}")
        if self.ratio != (3.0 / 4.0, 4.0 / 3.0):
            crop += (f" ratio_min: {t(self.ratio[0])} ratio_max: "
                     f"{t(self.ratio[1])}")
        if self.flip != 0.5:
            crop += f" flip_probability: {t(self.flip)}"
        parts = [f"count: {self.count}", f"crop {{ {crop} }}"]
        if self.interpolation == "bicubic":
            parts.append("interpolation: INTERPOLATION_BICUBIC")
        if self._augment_text:
            parts.append(self._augment_text.replace("\n", " "))
        return "views { " + " ".join(parts) + " }"

    def __repr__(self):
        return (f"ViewGroup(count={self.count}, size={self.size}, "
                f"scale={self.scale}, ratio={self.ratio}, flip={self.flip}, "
                f"interpolation={self.interpolation!r}, "
                f"augment={self.augment!r})")


def to_text(groups):
    """The ``Plan.views`` entries of `groups` (a sequence of
    :class:`ViewGroup`), one per line; "" for None. ValueError for more
    than MAX_GROUPS groups or MAX_VIEWS views."""
    if not groups:
        return ""
    if isinstance(groups, ViewGroup):
        raise ValueError("views must be a list of ViewGroups: views=[group]")
    groups = list(groups)
    for group in groups:
        if not isinstance(group, ViewGroup):
            raise ValueError(f"views takes batchd.augment.ViewGroup, not "
                             f"{group!r}")
    if len(groups) > MAX_GROUPS:
        raise ValueError(f"views has {len(groups)} groups; at most "
                         f"{MAX_GROUPS}")
    total = sum(group.count for group in groups)
    if total > MAX_VIEWS:
        raise ValueError(f"views has {total} views in all; at most "
                         f"{MAX_VIEWS}")
    return "\n".join(str(group) for group in groups)


def split(pixels, views):
    """The tensors of each view of a batch's flat `pixels` (a 1-D tensor
    over its slot: uint8 on the host backend, the output dtype on the device
    backend), from `views` [(byte offset, shape)], without a copy."""
    import math
    out = []
    itemsize = pixels.element_size()
    for offset, shape in views:
        start = offset // itemsize
        out.append(pixels[start:start + math.prod(shape)].view(shape))
    return out
