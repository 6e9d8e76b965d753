"""How the loader reaches daemons: the TLS and token arguments as the
native module takes them, the daemon's dataset list, and the rank and
world size a job runs with."""

import os

from . import _native


def security_args(tls_ca, tls_cert, tls_key, tls_server_name, token_file):
    """The native loader's `security` dict; paths may be str or PathLike."""
    return {name: None if value is None else os.fspath(value)
            for name, value in (("tls_ca", tls_ca), ("tls_cert", tls_cert),
                                ("tls_key", tls_key),
                                ("tls_server_name", tls_server_name),
                                ("token_file", token_file))}


def list_datasets(endpoint, timeout=10.0, *, tls_ca=None, tls_cert=None,
                  tls_key=None, tls_server_name=None, token_file=None):
    """``[(name, num_samples, class_names)]`` of the daemon's datasets.

    The TLS and token arguments are :class:`Loader`'s.
    """
    if tls_server_name is not None:
        tls_server_name = str(tls_server_name)
    return _native.list_datasets(
        endpoint, timeout,
        security=security_args(tls_ca, tls_cert, tls_key, tls_server_name,
                               token_file))


def default_rank_world_size():
    """torch.distributed when initialised, else RANK/WORLD_SIZE, else 0/1."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, world_size
