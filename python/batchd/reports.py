"""What a Loader says about its stream: the ring's resources, the C++
client's stall accounting and step timeline, and the diagnosis of what
limits the input, each epoch's reported when its iteration ends (the
Loader's ``report`` argument).

LoaderReports is a base class of batchd.Loader, over the native loader the
Loader holds (``_native``, None when closed). Not thread-safe, as the
Loader.
"""

from . import errors
from . import timeline as _timeline
from .diagnosis import Diagnosis
from .diagnosis import log_line as _log_diagnosis


class LoaderReports:
    """The reporting half of batchd.Loader (its ``_native`` is the native
    loader, None when closed)."""

    def _set_report(self, report):
        """What to do with each epoch's diagnosis line: `report` a callable,
        None (log it) or False (nothing); ValueError otherwise."""
        if report is None:
            report = _log_diagnosis
        elif report is False:
            report = None
        elif not callable(report):
            raise ValueError("report must be a callable, None or False")
        self._report = report
        self._epoch_diagnosis = ""

    def _end_of_epoch(self, native):
        # The C++ loader diagnosed the epoch when it reached its end.
        line = native.epoch_diagnosis
        if not line:
            return
        self._epoch_diagnosis = line
        if self._report is not None:
            self._report(line)

    @property
    def window(self):
        """Ring slots actually allocated (prefetch, or fewer if the daemon
        granted fewer)."""
        return self._require_open().window

    @property
    def slot_bytes(self):
        """Bytes of one ring slot: the largest batch's pixels."""
        return self._require_open().max_batch_bytes

    @property
    def ring_bytes(self):
        """Host memory of the ring: window x slot_bytes."""
        return self.window * self.slot_bytes

    @property
    def live_batches(self):
        """Slots leased by batches whose tensors are still alive."""
        native = self._native
        return 0 if native is None else native.live_batches

    def stats(self):
        """The C++ client's stall accounting since the loader was created.

        A dict of totals: ``batches``, ``images``, ``bytes`` (steps that
        returned a batch, their images and pixel bytes), ``received_bytes``
        (including batches dropped by a restart), and in seconds
        ``waited_s`` (time inside ``next()``, waiting for input),
        ``startup_waited_s`` (its part in each epoch's first batch),
        ``compute_s`` (from one batch to asking for the next: the training
        step), ``copy_s`` (copying bytes into buffers, and to the device on
        the device backend) and ``wall_s`` (since creation); the last
        step's ``last_step_waited_s``, ``last_step_compute_s``,
        ``last_step_copy_s``; and shares of ``wall_s`` (0..1)
        ``waited_fraction``, ``steady_waited_fraction`` (without
        ``startup_waited_s``), ``compute_fraction``, ``copy_fraction``, and
        rates per second ``batches_per_second``, ``images_per_second``,
        ``bytes_per_second``, ``received_bytes_per_second``. Over several
        daemons: ``rerequested`` (batches asked again after their daemon was
        lost), ``hedged`` (hedge requests); ``prefetch`` (ring slots in use
        now) and ``prefetch_grows`` (times ``prefetch="auto"`` grew it);
        ``reports_sent`` and ``reports_rejected`` (the trainer's
        wait/compute reports to the daemons, which size their workers by
        them under ``--workers auto``); ``transport`` (``"shared-memory"``,
        or bytes over ``"unix"`` or ``"tcp"``) and ``transport_note`` (why
        not shared memory, if not); and ``daemons``, one dict per
        daemon: ``endpoint``, ``state`` (connecting, up, draining, down,
        failed, removed), ``requested``, ``served``, ``lost``, ``hedges``,
        ``cancelled`` (losing copies withdrawn), ``discarded`` (losing copies
        that arrived whole), ``latency_s``, ``last_error`` and
        ``transport``. Two
        snapshots' differences give an interval's figures.
        """
        return self._require_open().stats()

    def timeline(self):
        """Where the last steps' time went, for a picture of one run: the
        last finished steps (at most 1,024, oldest first) as a dict of
        equal-length lists: ``epoch``, ``batch`` (its index), ``start_s``
        (when ``next()`` was asked for it, Unix seconds), ``wait_s`` (inside
        ``next()``), ``copy_s`` (copies to the device), ``compute_s`` (the
        rest of the step, up to asking for the next batch) and
        ``ring_copy_s`` (the receive thread's copy into the ring, beside
        earlier steps, not part of the step). A step ends when the next
        batch is asked for, so ``wait_s + copy_s + compute_s`` of
        consecutive steps add up to the time between their starts. The
        step of the batch held now is not included; a ``load_state_dict``
        that reopens the stream (a resume at another boundary) starts a new
        timeline.
        """
        return self._require_open().timeline()

    def plot_timeline(self, path, title=None):
        """Draws :meth:`timeline` as a PNG at `path` (one bar per step:
        wait red, copy orange, compute green) and returns `path`. Needs
        matplotlib (Debian: ``python3-matplotlib``); raises ImportError
        saying so without it."""
        return _timeline.plot(self.timeline(), path, title=title)

    def diagnose(self):
        """What limits the input in the current epoch so far: a
        :class:`Diagnosis` (verdict, line and figures), from the client's
        stall accounting and the daemon's status (fetched now, up to 2 s;
        without it the verdict rests on the client's figures alone).
        """
        return Diagnosis(**self._require_open().diagnose())

    @property
    def epoch_diagnosis(self):
        """The diagnosis line of the last epoch whose iteration ended, e.g.
        ``"epoch 3: compute-bound: waited 0.4 % of wall time; ..."``; ""
        before any has."""
        native = self._native
        if native is not None and not native.closed:
            line = native.epoch_diagnosis
            if line:
                return line
        return self._epoch_diagnosis

    def _require_open(self):
        if self._native is None or self._native.closed:
            raise errors.FailedPreconditionError("FAILED_PRECONDITION",
                                                 "the loader is closed")
        return self._native
