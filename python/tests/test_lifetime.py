"""Slot lifetime: tensors wrap ring slots without a copy; a live tensor's
slot is never reused; freeing tensors returns slots."""
import gc
import weakref

import pytest
import torch

import batchd


def make(daemon, **kwargs):
    return batchd.Loader(daemon.endpoint, "tiny", 4, size=16, seed=3,
                         rank=0, world_size=1, **kwargs)


def test_tensor_wraps_the_slot_without_a_copy(daemon, monkeypatch):
    with make(daemon, prefetch=3) as loader:
        seen = []
        real = batchd.Loader._to_tensors

        def spy(self, batch):
            seen.append(batch.address)
            return real(self, batch)

        monkeypatch.setattr(batchd.Loader, "_to_tensors", spy)
        addresses = set()
        for images, _ in loader:
            assert images.data_ptr() == seen[-1]
            addresses.add(images.data_ptr())
        # The ring is reused: only `window` distinct slots.
        assert len(addresses) <= loader.window == 3


def test_live_tensor_is_never_overwritten(daemon):
    with make(daemon, prefetch=3) as loader:
        loader.set_epoch(0)
        iterator = iter(loader)
        kept, _ = next(iterator)
        snapshot = kept.clone()
        assert loader.live_batches == 1
        others = set()
        for _ in range(2):  # three epochs' worth of batches
            for images, _ in iterator:
                assert images.data_ptr() != kept.data_ptr()
                others.add(images.data_ptr())
                del images
            iterator = iter(loader)
        assert torch.equal(kept, snapshot)
        assert len(others) <= 2  # the two slots not held
        # A view keeps the slot too.
        view = kept[1:]
        del kept
        assert loader.live_batches == 1
        del view
        assert loader.live_batches == 0


def test_holding_every_slot_blocks_read_ahead_until_one_is_freed(daemon):
    with make(daemon, prefetch=2) as loader:
        iterator = iter(loader)
        first, _ = next(iterator)
        second, _ = next(iterator)
        assert loader.live_batches == 2
        with pytest.raises(batchd.errors.FailedPreconditionError,
                           match="slots of the ring are held"):
            next(iterator)
        # The failed call did not advance: freeing one slot lets it go on
        # with the next batch.
        position = loader.state_dict()["next_batch"]
        del first
        loader.load_state_dict(dict(loader.state_dict(),
                                    next_batch=position))
        third, _ = next(iter(loader))
        assert loader.live_batches == 2
        assert third.data_ptr() != second.data_ptr()


def test_reference_cycles_are_collected_before_giving_up(daemon):
    with make(daemon, prefetch=2) as loader:
        iterator = iter(loader)
        for _ in range(2):
            images, _ = next(iterator)
            holder = {"images": images}
            holder["self"] = holder  # unreachable cycle once dropped
            del images, holder
        assert loader.live_batches == 2
        images, _ = next(iterator)  # gc frees the cycles, then it proceeds
        assert images.shape == (4, 3, 16, 16)


def test_normalized_cpu_output_returns_the_slot_at_once(daemon):
    with make(daemon, prefetch=2, normalize=batchd.IMAGENET_NORMALIZE) as l:
        held = [images for images, _ in l]  # float copies: no slot held
        assert len(held) == len(l) == 12
        assert l.live_batches == 0


def test_tensors_outlive_the_loader_and_gc_closes_it(daemon):
    loader = make(daemon)
    images, _ = next(iter(loader))
    snapshot = images.clone()
    ref = weakref.ref(loader)
    del loader
    gc.collect()
    assert ref() is None
    assert torch.equal(images, snapshot)  # the slot is still ours
    del images
    # The daemon is fine and serves new loaders.
    with make(daemon) as again:
        assert len(list(x.shape for x, _ in again)) == 12


def test_closed_loader_refuses_to_iterate(daemon):
    loader = make(daemon)
    loader.close()
    loader.close()
    with pytest.raises(batchd.errors.FailedPreconditionError, match="closed"):
        iter(loader)


def test_the_iterator_does_not_hold_the_batch_it_yielded(daemon):
    # prefetch=1 streams as long as the consumer drops each batch before
    # asking for the next: the iterator itself keeps no reference.
    with make(daemon, prefetch=1) as loader:
        iterator = iter(loader)
        count = 0
        while True:
            try:
                images, labels = next(iterator)
            except StopIteration:
                break
            assert loader.live_batches == 1
            del images, labels
            assert loader.live_batches == 0
            count += 1
        assert count == len(loader) == 12
