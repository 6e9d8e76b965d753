"""batchd._native.LoaderArgs: the one option list of the native loaders,
whose defaults (the C++ client::LoaderOptions's) batchd.Loader shows."""
import inspect

import pytest

import batchd
from batchd import _native


def test_loader_defaults_are_the_native_ones():
    defaults = _native.LoaderArgs()
    loader = {name: p.default for name, p in
              inspect.signature(batchd.Loader).parameters.items()}
    # client/loader.h's LoaderOptions, through the native module.
    assert (defaults.prefetch, defaults.hedge_factor) == (4, 3.0)
    assert (defaults.connect_timeout, defaults.unavailable_timeout) == (
        10.0, 30.0)
    assert defaults.batch_progress_timeout == 5.0
    for name in ("prefetch", "hedge_factor", "connect_timeout",
                 "unavailable_timeout", "batch_progress_timeout",
                 "shared_memory", "mode", "size",
                 "layout", "interpolation", "decoded_max_side", "seed",
                 "shuffle",
                 "shuffle_window_shards",
                 "drop_last", "job"):
        assert loader[name] == getattr(defaults, name), name
    assert loader["prefetch_memory"] == defaults.auto_prefetch_max_bytes


def test_keywords_set_fields_and_unknown_ones_fail():
    args = _native.LoaderArgs(endpoint="localhost:1", dataset="d",
                              batch_size=8, scale=(0.5, 1.0), last_epoch=3,
                              security={"token_file": "/t"})
    assert (args.endpoint, args.dataset, args.batch_size) == (
        "localhost:1", "d", 8)
    assert args.scale == (0.5, 1.0) and args.last_epoch == 3
    assert _native.LoaderArgs().decoded_max_side == 0
    assert _native.LoaderArgs(decoded_max_side=320).decoded_max_side == 320
    assert args.security["token_file"] == "/t"
    assert args.security["tls_ca"] is None
    assert args.prefetch == _native.LoaderArgs().prefetch
    assert "prefetch=4" in repr(_native.LoaderArgs())
    with pytest.raises(TypeError, match="prefetch_max_bytes"):
        _native.LoaderArgs(prefetch_max_bytes=1)
    with pytest.raises(ValueError, match="security takes"):
        _native.LoaderArgs(security={"token": "x"})


@pytest.mark.parametrize("options, message", [
    (dict(mode="test"), "mode must be 'train' or 'eval'"),
    (dict(layout="chw"), "layout must be 'nchw' or 'nhwc'"),
    (dict(mode="eval", flip=0.5), "apply to mode='train' only"),
    (dict(resize_shorter=256), "applies to mode='eval' only"),
    (dict(connect_timeout=0.0), "connect_timeout must be > 0"),
    (dict(hedge_factor=-1.0), "hedge_factor must be >= 0"),
    (dict(batch_progress_timeout=-1.0), "batch_progress_timeout must be >= 0"),
])
def test_options_that_do_not_fit_raise_value_error(options, message):
    args = _native.LoaderArgs(endpoint="127.0.0.1:1", dataset="tiny",
                              batch_size=8, **options)
    with pytest.raises(ValueError, match=message):
        _native.NativeLoader(args)
