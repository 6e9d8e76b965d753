"""Multi-view plans (Plan.views): each sample decoded once and cut into
several views, each with its own crop, flip and ops; a list of tensors per
batch, one per view; view 0 as the same plan without views; every
(image, repeat) once across ranks and through a kill -9 of one of two
daemons; one decode per image (decoded cache) or per sample (without); the
device backend's views (the DeviceLoader's normalisation, on the CPU here
without a GPU) equal to the host backend's."""
import collections
import re

import pytest
import torch

import batchd
from batchd import _native
from batchd import augment as A
from batchd_testing.daemon import Daemon
from conftest import fnv1a64

IMAGES = 48
# Two "global" views at 32 and three "local" at 16: DINO's shape, small.
GROUPS = [A.ViewGroup(count=2, size=32, scale=(0.4, 1.0)),
          A.ViewGroup(count=3, size=16, scale=(0.05, 0.4),
                      augment=[A.RandomGrayscale(p=0.5)])]
VIEWS = 5


def read(endpoint, rank=0, world=1, epoch=1, kill=None, **kwargs):
    """[(sample, repeat, [fnv of each view's pixels])] of `rank`'s epoch;
    `kill` (a Daemon) is killed after the third batch."""
    kwargs.setdefault("views", GROUPS)
    loader = batchd.Loader(endpoint, "tiny", batch_size=2, rank=rank,
                           world_size=world, seed=5, report=False, **kwargs)
    try:
        loader.set_epoch(epoch)
        out = []
        for step, (views, labels) in enumerate(loader):
            if isinstance(views, torch.Tensor):  # a plan without views
                views = [views]
            if kill is not None and step == 3:
                kill.kill()
            repeats = loader.sample_repeats or [0] * len(labels)
            for i, (sample, repeat) in enumerate(
                    zip(loader.sample_indices, repeats)):
                out.append((sample, repeat,
                            [fnv1a64(v[i].numpy().tobytes()) for v in views]))
        return out
    finally:
        loader.close()


def metric(page, name):
    match = re.search(rf"^{re.escape(name)} (\S+)$", page, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_each_view_has_its_shape_and_its_own_draw(daemon):
    loader = batchd.Loader(daemon.endpoint, "tiny", batch_size=4, seed=5,
                           views=GROUPS, report=False)
    try:
        views, labels = next(iter(loader))
        assert len(views) == VIEWS
        assert [tuple(v.shape) for v in views] == (
            [(4, 3, 32, 32)] * 2 + [(4, 3, 16, 16)] * 3)
        assert all(v.dtype == torch.uint8 for v in views)
        assert labels.shape == (4,)
        for i in range(4):
            hashes = {fnv1a64(v[i].numpy().tobytes()) for v in views}
            assert len(hashes) == VIEWS, f"sample {i}: views share a draw"
    finally:
        loader.close()


def test_normalised_views_are_float(daemon):
    loader = batchd.Loader(daemon.endpoint, "tiny", batch_size=2, seed=5,
                           views=GROUPS, normalize=batchd.IMAGENET_NORMALIZE,
                           report=False)
    try:
        views, _ = next(iter(loader))
        assert all(v.dtype == torch.float32 for v in views)
        assert tuple(views[2].shape) == (2, 3, 16, 16)
    finally:
        loader.close()


def test_view_zero_is_the_plan_without_views(daemon):
    # Same crop, same cap: the first view's bytes are the one-view plan's.
    single = read(daemon.endpoint, views=None, size=32, scale=(0.4, 1.0),
                  decoded_max_side=64)
    views = read(daemon.endpoint, decoded_max_side=64)
    assert [(s, r) for s, r, _ in single] == [(s, r) for s, r, _ in views]
    assert [h[0] for _, _, h in single] == [h[0] for _, _, h in views]
    assert all(h[0] != h[1] for _, _, h in views)


def test_every_image_repeat_once_over_ranks_with_views(daemon):
    world, repeats = 2, 4
    records = [r for rank in range(world)
               for r in read(daemon.endpoint, rank, world, repeats=repeats)]
    pairs = collections.Counter((s, r) for s, r, _ in records)
    assert sum(pairs.values()) == IMAGES and set(pairs.values()) == {1}
    assert len({s for s, _ in pairs}) == IMAGES // repeats
    # Every (image, repeat, view) its own draw.
    hashes = [h for _, _, views in records for h in views]
    assert len(set(hashes)) == len(hashes)


def test_a_killed_daemon_keeps_the_bytes(daemon, two_daemons):
    endpoints = ",".join(d.endpoint for d in two_daemons)
    reference = sorted(read(daemon.endpoint, repeats=2))
    got = sorted(read(endpoints, repeats=2, kill=two_daemons[0]))
    assert got == reference


def test_views_come_from_one_decode(binaries, dataset_dir, tmp_path):
    with Daemon(binaries["daemon"], {"tiny": dataset_dir},
                ["--workers", "2", "--decoded-cache-bytes", "64000000"],
                directory=tmp_path / "d", metrics=True) as d:
        # epochs=2: epoch 1 is the last, so nothing of a next epoch is read
        # ahead meanwhile. Each image of the epoch (12, each 4 times) is
        # decoded once for its 4 repeats x 5 views.
        records = read(d.endpoint, repeats=4, decoded_max_side=64, epochs=2)
        assert len(records) == IMAGES
        page = d.metrics()
        decodes = metric(page, "batchd_decoded_cache_misses_total")
        uses = (decodes + metric(page, "batchd_decoded_cache_hits_total") +
                metric(page, "batchd_decoded_cache_coalesced_total"))
        assert decodes == IMAGES // 4
        assert uses == IMAGES
    with Daemon(binaries["daemon"], {"tiny": dataset_dir},
                ["--workers", "2"], directory=tmp_path / "e",
                metrics=True) as d:
        # Without the cap: the whole image once per sample, not per view.
        records = read(d.endpoint, epochs=2)
        assert len(records) == IMAGES
        assert metric(d.metrics(),
                      'batchd_stage_seconds_count{stage="decode"}') == IMAGES


needs_device_loader = pytest.mark.skipif(
    not _native.HAVE_DEVICE_LOADER, reason="built without the DeviceLoader")


@needs_device_loader
@pytest.mark.parametrize("options", [
    {},
    {"normalize": batchd.IMAGENET_NORMALIZE},
    {"normalize": batchd.IMAGENET_NORMALIZE, "layout": "nhwc"},
    {"normalize": batchd.IMAGENET_NORMALIZE, "dtype": torch.float16},
])
def test_device_backend_views_are_the_host_backends(daemon, options):
    def make(backend):
        return batchd.Loader(daemon.endpoint, "tiny", batch_size=5, seed=5,
                             views=GROUPS, backend=backend, report=False,
                             **options)

    with make("device") as device, make("host") as host:
        assert device.backend == "device" and host.backend == "host"
        device.set_epoch(1)
        host.set_epoch(1)
        count = 0
        for (a, la), (b, lb) in zip(device, host):
            assert device.sample_indices == host.sample_indices
            assert torch.equal(la, lb)
            assert len(a) == len(b) == VIEWS
            for view, (x, y) in enumerate(zip(a, b)):
                assert x.dtype == y.dtype and x.shape == y.shape, view
                # The same formula, (x / 255 - mean) / std: one fused
                # multiply-add in C++, torch's addcmul on the host.
                torch.testing.assert_close(
                    x, y, rtol=0,
                    atol=1e-6 if x.dtype == torch.float32 else 1e-3)
            count += 1
        # 48 images in batches of 5: the last batch has 3 samples.
        assert count == len(device) == 10
        assert [tuple(v.shape) for v in a] == [tuple(v.shape) for v in b]
        assert a[0].shape[0] == 3


@needs_device_loader
def test_a_device_backend_view_holds_the_batchs_slot(daemon):
    with batchd.Loader(daemon.endpoint, "tiny", batch_size=2, seed=5,
                       views=GROUPS, backend="device", depth=2,
                       normalize=batchd.IMAGENET_NORMALIZE,
                       report=False) as loader:
        iterator = iter(loader)
        first, _ = next(iterator)
        kept = first[3]
        snapshot = kept.clone()
        del first
        second, _ = next(iterator)
        assert loader.live_batches == 2
        with pytest.raises(batchd.errors.FailedPreconditionError,
                           match="held by live tensors"):
            next(iterator)
        assert torch.equal(kept, snapshot)
        del kept, second
        assert loader.live_batches == 0


def test_bad_view_plans_are_refused_naming_the_field(daemon):
    with pytest.raises(ValueError, match="17 views"):
        batchd.Loader(daemon.endpoint, "tiny", batch_size=2, report=False,
                      views=[A.ViewGroup(count=9, size=32),
                             A.ViewGroup(count=8, size=16)])
    with pytest.raises(ValueError, match="count"):
        A.ViewGroup(count=0, size=32)
    with pytest.raises(ValueError, match="own augment"):
        batchd.Loader(daemon.endpoint, "tiny", batch_size=2, report=False,
                      views=GROUPS, augment=[A.RandomGrayscale(p=0.5)])
    for backend in ("auto", "device"):
        with pytest.raises(ValueError, match="erasing and mix do not work"):
            batchd.Loader(daemon.endpoint, "tiny", batch_size=2, report=False,
                          views=GROUPS, backend=backend,
                          normalize=batchd.IMAGENET_NORMALIZE,
                          erasing=A.RandomErasing(0.5))
    with pytest.raises(batchd.errors.InvalidArgumentError,
                       match="pipeline.decoded_max_side"):
        batchd.Loader(daemon.endpoint, "tiny", batch_size=2, report=False,
                      views=GROUPS, decoded_max_side=20)
