"""What limits a training run's input, as :meth:`batchd.Loader.diagnose`
finds it (the C++ client's client/diagnosis.h computes it): the verdicts,
the named tuple that carries one, and the per-epoch log line."""
import collections
import logging

_logger = logging.getLogger("batchd")

#: What :meth:`Loader.diagnose` can conclude (client/diagnosis.h).
VERDICTS = ("compute-bound", "input-bound", "network-bound", "client-bound",
            "storage-bound", "unknown")


class Diagnosis(collections.namedtuple(
        "Diagnosis", ["verdict", "line", "waited_fraction", "copy_fraction",
                      "daemon_busy_fraction", "daemon_workers",
                      "stream_bytes_per_second", "daemon_augment_share"])):
    """What limits the input, as :meth:`Loader.diagnose` finds it.

    ``verdict`` is one of :data:`VERDICTS`; ``line`` says it in one plain
    line (``str(diagnosis)`` is the line), e.g. ``"input-bound: waited 43 %
    of wall time; daemon workers 100 % busy (1 worker) -> add workers or a
    daemon"``. The figures it rests on: ``waited_fraction`` (the steady
    share, without each epoch's first batch), ``copy_fraction``,
    ``daemon_busy_fraction`` (None when the daemon's status was not
    available), ``daemon_workers``, ``stream_bytes_per_second`` and
    ``daemon_augment_share`` (the share of the daemon workers' time per
    image spent in the plan's augmentation ops, 0 without them). When
    saturated workers spend enough of their time augmenting to explain the
    wait, an input-bound line says so, e.g. ``"...; augmentation takes 60 %
    of the workers' time per image -> add workers or a daemon, or a lighter
    augmentation policy"``.
    """

    __slots__ = ()

    def __str__(self):
        return self.line


def log_line(line):
    """Logs a diagnosis line at the end of an epoch (the default report)."""
    _logger.info("%s", line)
