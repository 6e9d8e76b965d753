"""What the loader makes of a batch: the tensors (and fields) it yields
(to_tensors), from the device backend's output slot or from the ring's
uint8 pixels; on the host path normalised to a float dtype if asked (on the
CPU or after the copy to the device), with the asynchronous copies to a
CUDA device still reading their slots.

    output = TensorOutput(torch.device("cuda"), "nchw",
                          normalize=batchd.IMAGENET_NORMALIZE, dtype=None)
    images, labels = output.convert(pixels, labels)   # pixels wrap a slot
    ...
    output.reap(wait=True)    # before the slots go away

Not thread-safe: one per Loader.
"""

from . import fields as _fields
from . import views as _views


class TensorOutput:
    """The host path's conversion of a batch (the device backend's
    DeviceLoader does the same in C++)."""

    def __init__(self, device, layout, normalize, dtype):
        """`normalize` is (mean, std) in 0..1 units or None; `dtype` a torch
        dtype or None (uint8, or float32 with `normalize`). ValueError for
        a combination that cannot hold the output."""
        import torch

        self.device = device
        #: The float dtype images are converted to, or None for uint8.
        self.float_dtype = None
        self._scale = self._bias = None
        # Host tensors whose asynchronous copy to the device is in flight:
        # [(cuda event, host tensor)].
        self._in_flight = []
        if dtype is not None and dtype != torch.uint8:
            if not dtype.is_floating_point:
                raise ValueError(f"dtype must be torch.uint8 or a float dtype, "
                                 f"not {dtype}")
            self.float_dtype = dtype
        elif dtype == torch.uint8 and normalize is not None:
            raise ValueError("normalize gives float tensors; dtype=torch.uint8 "
                             "cannot hold them")
        if normalize is not None:
            mean, std = normalize
            mean = torch.tensor(mean, dtype=torch.float32)
            std = torch.tensor(std, dtype=torch.float32)
            if mean.numel() != 3 or std.numel() != 3 or bool((std <= 0).any()):
                raise ValueError("normalize must be (mean, std) with 3 values "
                                 "each and std > 0")
            self.float_dtype = self.float_dtype or torch.float32
        elif self.float_dtype is not None:
            mean = torch.zeros(3)
            std = torch.ones(3)
        else:
            return
        # x_float = (x / 255 - mean) / std = x * scale + bias
        scale = 1.0 / (255.0 * std)
        bias = -mean / std
        view = (1, 3, 1, 1) if layout == "nchw" else (1, 1, 1, 3)
        self._scale = scale.view(view).to(device)
        self._bias = bias.view(view).to(device)

    def convert(self, pixels, labels):
        """(images, labels) on the device, from uint8 `pixels` that wrap a
        slot (so on the CPU without normalisation, the slot itself)."""
        if self.device.type == "cpu":
            return self._normalized(pixels), labels
        import torch

        # The copy reads the slot asynchronously: keep the host tensor (and
        # so the slot) until an event recorded after it has completed.
        self.reap(wait=False)
        images = pixels.to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._in_flight.append((event, pixels))
        labels = labels.to(self.device, non_blocking=True)
        return self._normalized(images), labels

    def reap(self, wait):
        """Forgets the copies that have completed; with `wait`, waits for
        all of them first."""
        kept = []
        for event, host in self._in_flight:
            if wait:
                event.synchronize()
            elif not event.query():
                kept.append((event, host))
        self._in_flight = kept

    def _normalized(self, images):
        if self.float_dtype is None:
            return images
        import torch

        images = torch.addcmul(self._bias, images, self._scale)
        if images.dtype != self.float_dtype:
            images = images.to(self.float_dtype)
        return images


def to_tensors(batch, output, backend, fields, batch_format, views):
    """What the loader yields for `batch` (a native batch of `backend`,
    "device" or "host"), and the batch's field counts, or None when the
    batch yields no fields (`fields` as parse_fields gives them, and no
    dict `batch_format`). `output` is the loader's TensorOutput; `views`
    its ViewGroups."""
    import torch

    counts = None
    if backend == "device" and batch.num_classes > 0:
        # Mixed: float soft labels [n, num_classes].
        labels = torch.frombuffer(bytearray(batch.soft_labels),
                                  dtype=torch.float32).view(
                                      -1, batch.num_classes)
    else:
        labels = torch.tensor(batch.labels, dtype=torch.int64)
    # What the batch says beside its pixels, read while it is ours (the
    # device backend's DLPack capsule takes it over).
    view_shapes = batch.views if views else None
    with_fields = bool(fields) or batch_format == "dict"
    if with_fields:
        values, counts = batch.field_values, batch.field_counts
    if backend == "device":
        # The DeviceLoader's output slot, final dtype and layout; the
        # capsule hands the batch to the tensor, whose deleter releases
        # the slot (after the work queued on the consumer stream). With
        # views, the flat slot cut into one tensor per view (the slot is
        # released when the last of them is freed).
        index = output.device.index or 0
        from torch.utils.dlpack import from_dlpack
        images = from_dlpack(batch.to_dlpack(index))
        if view_shapes is not None:
            images = _views.split(images, view_shapes)
        if output.device.type == "cuda":
            labels = labels.to(output.device, non_blocking=True)
    elif view_shapes is not None:
        # Wraps the slot: the tensors' storage holds `batch`, which holds
        # the slot until the storage is freed.
        flat = torch.frombuffer(batch, dtype=torch.uint8)
        images = []
        for pixels in _views.split(flat, view_shapes):
            view, converted = output.convert(pixels, labels)
            images.append(view)
        labels = converted
    else:
        pixels = torch.frombuffer(batch, dtype=torch.uint8).view(
            batch.shape)
        images, labels = output.convert(pixels, labels)
    if with_fields:
        return _fields.batch_output(batch_format, images, labels, fields,
                                    values), counts
    return (images, labels), counts
