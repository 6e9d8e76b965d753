"""Which native loader streams a Loader's plan, and how its next batch is
fetched: the C++ DeviceLoader (pinned ring, copy stream and normalisation
on a GPU, or its C++ CPU normaliser without one: ``"device"``) or the plain
ring whose pixels torch copies and normalises (``"host"``).

    backend = for_plan(backend, views, augment, erasing, mix, mode,
                       output.float_dtype)       # what the plan allows
    check(backend)                                # what this build has
    native, name = open_native(args, backend, output, normalize, depth)
    batch = next_batch(native, name, output)      # None at the epoch's end

Functions only; the Loader holds the native loader (not thread-safe).
"""

import gc

from . import _native, errors


def for_plan(backend, views, augment, erasing, mix, mode, float_dtype):
    """`backend` ("auto", "host" or "device") as the plan's `views` and
    `erasing` / `mix` (applied in the device backend's normalisation)
    leave it; ValueError for a plan that cannot
    run as asked. `float_dtype` is the output's, None for uint8."""
    if views:
        if augment or erasing is not None or mix is not None:
            raise ValueError("with views, give each ViewGroup its own "
                             "augment; erasing and mix do not work with "
                             "views")
        if mode != "train":
            raise ValueError("views are training crops: mode must be "
                             "'train'")
    if erasing is not None or mix is not None:
        if float_dtype is None:
            raise ValueError("erasing and mix work on the normalised "
                             "tensor: give normalize (or a float dtype)")
        if backend == "host":
            raise ValueError("erasing and mix run in the device backend's "
                             "normalisation (on the GPU or the CPU): use "
                             "backend='device' or 'auto'")
        backend = "device"
    return backend


def check(backend):
    """ValueError unless `backend` is one this build can open."""
    if backend not in ("auto", "host", "device"):
        raise ValueError(f"backend must be auto, host or device, not "
                         f"{backend!r}")
    if backend == "device" and not _native.HAVE_DEVICE_LOADER:
        raise ValueError("backend='device': this build of batchd has no "
                         "DeviceLoader")


def open_native(args, backend, output, normalize, depth):
    """(native loader, "device" or "host") streaming `args` on `backend`:
    "auto" is "device" for a CUDA output device when the module has the
    DeviceLoader and C++ can use the GPU, else "host". `output` is the
    loader's TensorOutput; `normalize` and `depth` its arguments."""
    device = output.device
    if backend == "device" or (backend == "auto" and
                               device.type == "cuda" and
                               _native.HAVE_DEVICE_LOADER):
        native = _open_device_loader(args, output, normalize, depth)
        if backend == "device" or native.path == "cuda":
            return native, "device"
        native.close()  # C++ sees no usable GPU: torch copies
    return _native.NativeLoader(args), "host"


def _open_device_loader(args, output, normalize, depth):
    import torch

    names = {torch.uint8: "uint8", torch.float32: "float32",
             torch.float16: "float16", torch.bfloat16: "bfloat16"}
    out_dtype = output.float_dtype or torch.uint8
    if out_dtype not in names:
        raise ValueError(f"backend 'device' produces {list(names)}, not "
                         f"{out_dtype}")
    mean, std = ((), ()) if normalize is None else normalize
    on_cuda = output.device.type == "cuda"
    stream = (torch.cuda.current_stream(output.device).cuda_stream
              if on_cuda else 0)
    options = {} if depth is None else {"depth": depth}
    return _native.NativeDeviceLoader(
        args, dtype=names[out_dtype], mean=[float(m) for m in mean],
        std=[float(s) for s in std], consumer_stream=stream,
        force_host=not on_cuda, **options)


def next_batch(native, backend, output):
    """The next batch of `native` (opened on `backend`), None at the end of
    the epoch. With every slot leased, collects garbage (tensors caught in
    reference cycles), forgets `output`'s finished copies and tries once
    more before FailedPreconditionError says what holds the ring."""
    if backend == "device":
        import torch
        device = output.device
        stream = (torch.cuda.current_stream(device).cuda_stream
                  if device.type == "cuda" else 0)
        fetch = lambda: native.next(stream)  # noqa: E731
    else:
        fetch = native.next
    try:
        return fetch()
    except errors.FailedPreconditionError:
        if native.live_batches == 0:
            raise
    # Every slot is leased. Tensors caught in reference cycles may be
    # unreachable already: collect them and try once more.
    gc.collect()
    output.reap(wait=True)
    try:
        return fetch()
    except errors.FailedPreconditionError as error:
        raise errors.FailedPreconditionError(
            error.code,
            f"all slots of the ring are held by live tensors from this "
            f"loader ({native.live_batches}), so it cannot read ahead. "
            f"Free them, .clone() the ones you keep, or raise prefetch "
            f"(or depth). ({error.message})") from None
