"""The DeviceLoader backend (client/device_loader.h) through DLPack. Without
a GPU it runs the DeviceLoader's host path (C++ CPU normaliser), which
shares everything with the GPU path but the copy."""
import pytest
import torch

import batchd
from batchd import _native

pytestmark = pytest.mark.skipif(not _native.HAVE_DEVICE_LOADER,
                                reason="built without the DeviceLoader")


def make(daemon, **kwargs):
    return batchd.Loader(daemon.endpoint, "tiny", 8, size=24, seed=4,
                         rank=0, world_size=1, **kwargs)


@pytest.mark.parametrize("options", [
    {}, {"layout": "nhwc"},
    {"normalize": batchd.IMAGENET_NORMALIZE},
    {"normalize": batchd.IMAGENET_NORMALIZE, "layout": "nhwc"},
    {"dtype": torch.float32},
])
def test_same_tensors_as_the_host_backend(daemon, options):
    with make(daemon, backend="device", **options) as device, \
            make(daemon, backend="host", **options) as host:
        assert device.backend == "device" and host.backend == "host"
        count = 0
        for (a, la), (b, lb) in zip(device, host):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
            assert torch.equal(la, lb)
            count += 1
        assert count == len(device) == 6


def test_dlpack_tensor_holds_its_output_slot(daemon):
    with make(daemon, backend="device", depth=2,
              normalize=batchd.IMAGENET_NORMALIZE) as loader:
        iterator = iter(loader)
        first, _ = next(iterator)
        snapshot = first.clone()
        second, _ = next(iterator)
        assert loader.live_batches == 2
        with pytest.raises(batchd.errors.FailedPreconditionError,
                           match="held by live tensors"):
            next(iterator)
        assert torch.equal(first, snapshot)
        del first, second
        assert loader.live_batches == 0
        state = loader.state_dict()
        assert state["next_batch"] == 2
        loader.load_state_dict(state)
        assert sum(1 for _ in loader) == 4


def test_dict_batches_read_the_batch_before_dlpack_takes_it(daemon):
    # The capsule takes the batch over: what the batch says beside its
    # pixels is read first (this raised "the batch has been released").
    with make(daemon, backend="device", batch_format="dict",
              normalize=batchd.IMAGENET_NORMALIZE) as device, \
            make(daemon, backend="host", batch_format="dict",
                 normalize=batchd.IMAGENET_NORMALIZE) as host:
        a, b = next(iter(device)), next(iter(host))
        assert sorted(a) == sorted(b) == ["image", "label"]
        torch.testing.assert_close(a["image"], b["image"], rtol=0, atol=1e-6)
        assert torch.equal(a["label"], b["label"])
