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
                      "stream_bytes_per_second"])):
    """What limits the input, as :meth:`Loader.diagnose` finds it.

    ``verdict`` is one of :data:`VERDICTS`; ``line`` says it in one plain
    line (``str(diagnosis)`` is the line), e.g. ``"input-bound: waited 43 %
    of wall time; daemon workers 100 % busy (1 worker) -> add workers or a
    daemon"``. The figures it rests on: ``waited_fraction`` (the steady
    share, without each epoch's first batch), ``copy_fraction``,
    ``daemon_busy_fraction`` (None when the daemon's status was not
    available), ``daemon_workers`` and ``stream_bytes_per_second``.
    """

    __slots__ = ()

    def __str__(self):
        return self.line


def log_line(line):
    """Logs a diagnosis line at the end of an epoch (the default report)."""
    _logger.info("%s", line)
