"""batchd: stream ready training batches from a batchd daemon into PyTorch.

A drop-in for ``torch.utils.data.DataLoader`` over an image dataset::

    import batchd
    loader = batchd.Loader("localhost:7070", "imagenet", batch_size=256,
                           size=224, normalize=batchd.IMAGENET_NORMALIZE)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:     # torch tensors
            ...

The daemon decodes and augments; the loader wraps each batch's bytes where
the client received them (no copy) and yields ``(images, labels)``.

Slot lifetime: every batch lives in one slot of a ring of ``prefetch``
buffers. A yielded uint8 tensor *is* that slot: the slot stays leased, and
is never overwritten, until every tensor (and view) of it has been freed.
Holding on to tensors therefore holds slots; with all of them held, the
loader cannot read ahead and ``next()`` raises
:class:`batchd.errors.FailedPreconditionError` instead of waiting forever.
``.clone()`` what you keep. With ``normalize`` (or a float ``dtype``) on the
CPU, the float tensor is new memory and the slot is returned as soon as it
has been converted.
"""

import pkgutil

# Lets the package come from the source tree while the extension comes from
# a build tree (both on sys.path).
__path__ = pkgutil.extend_path(__path__, __name__)

from . import augment, errors  # noqa: E402
from .diagnosis import VERDICTS, Diagnosis  # noqa: E402
from ._native import LoaderArgs, NativeLoader  # noqa: E402,F401
from .errors import BatchdError  # noqa: E402
from .connection import list_datasets  # noqa: E402
from .loader import IMAGENET_NORMALIZE, Loader  # noqa: E402
from .augment import reference_recipe  # noqa: E402
from .state import merge_states  # noqa: E402
from .mixture import Source  # noqa: E402

__all__ = ["Loader", "Diagnosis", "BatchdError", "augment", "errors",
           "list_datasets", "merge_states", "reference_recipe",
           "IMAGENET_NORMALIZE", "VERDICTS", "Source"]
