"""batchd.Loader: the PyTorch-facing loader over the native client.

Re-exported by the package (``batchd.Loader``); the package docstring says
how to use it and what a yielded tensor's lifetime is.
"""

import logging
import time

from . import augment as _augment
from . import backend as _backend
from . import erase_mix as _erase_mix
from . import connection as _connection
from . import fields as _fields
from . import mixture as _mixture
from . import output as _output
from . import reports as _reports
from . import views as _views
from ._native import LoaderArgs
from .state import STATE_VERSION as _STATE_VERSION
from .state import check_epoch as _check_epoch
from .state import epoch_length as _epoch_length
from .state import global_position as _global_position
from .state import resume_point as _resume_point

#: torchvision's ImageNet ``Normalize(mean, std)``, in 0..1 units.
IMAGENET_NORMALIZE = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


_logger = logging.getLogger("batchd")

# The defaults of Loader's plan and stream options: the C++ client's
# (client::LoaderOptions, client/loader.h), as the native module reads them.
_DEFAULTS = LoaderArgs()


class Loader(_reports.LoaderReports):
    """Iterable over ``(images, labels)`` batches of one plan.

    Args:
      endpoint: the daemons: an address (``"host:port"`` or
        ``"unix:/path"``), a list of them (or one comma-separated string),
        or ``"dns:///name:port"`` for every address a name resolves to (a
        Kubernetes headless Service; looked up again every 10 s). Requests
        are spread over the healthy daemons; a lost one's batches are asked
        of the others, so every batch of an epoch arrives exactly once.
      dataset: name of a dataset the daemon serves (see :func:`list_datasets`).
      batch_size: samples per batch.
      mode: ``"train"`` (RandomResizedCrop + horizontal flip) or ``"eval"``
        (resize the shorter side, then centre crop).
      size: output height and width, pixels.
      scale, ratio: RandomResizedCrop's ranges, ``(min, max)``; None for
        torchvision's defaults. Train only.
      flip: probability of a horizontal flip (train only; default 0.5).
      resize_shorter: eval only; default ``size * 256 // 224``.
      interpolation: how the crop (or the eval resize) is resized to
        ``size``: ``"bilinear"`` (default) or ``"bicubic"``, both
        antialiased as torchvision's ``antialias=True``; torchvision's
        InterpolationMode is taken too.
      augment: augmentation ops after the crop and flip, in order: a list
        of :mod:`batchd.augment` ops (``[batchd.augment.RandAugment(
        magnitude=9, magnitude_std=0.5)]``), or their text-format entries
        as one string (what ``batchd-client --augment`` takes). The daemon
        applies them; every random draw comes from the sample's generator.
        :func:`batchd.augment.reference_recipe` gives torchvision's
        reference recipes (docs/augment.md).
      erasing: a :class:`batchd.augment.RandomErasing`, or None: erases a
        rectangle of each sample (with its probability) after
        normalisation, as torchvision's RandomErasing after Normalize.
      mix: a :class:`batchd.augment.MixupCutmix`, or None: mixes each
        batch (MixUp or CutMix) after normalisation and yields float soft
        labels ``[B, num_classes]`` (label smoothing included) instead of
        integer labels. The daemon draws both (a pure function of plan,
        epoch and batch index); the client applies them on the GPU or the
        CPU with the same results. Both need ``normalize`` (or a float
        ``dtype``) and run on the ``"device"`` backend (chosen for them
        under ``"auto"``).
      views: a list of :class:`batchd.augment.ViewGroup`, or None: each
        sample is decoded once and cut into every group's views, each its
        own crop, flip and ops (SimCLR: one group of 2; DINO: 2 at 224 and
        6 at 96). Batches are then ``(views, labels)`` with ``views`` a
        list of tensors, one per view in group order, each
        ``[B, 3, size, size]`` (normalised as one-view batches are). The
        groups replace size, scale, ratio, flip, interpolation and augment
        (docs/augment.md, "Views"). Both backends serve them: on
        ``"device"`` each view is normalised on its own by the
        DeviceLoader, the views sharing one output slot.
      layout: ``"nchw"`` (default, what torch models take) or ``"nhwc"``.
      decoded_max_side: 0 (default) decodes each crop from the file. N > 0
        decodes each image whole with its longer side capped at N pixels
        and crops that, a different (slightly softer) pipeline whose decoded
        images a daemon with ``--decoded-cache-bytes`` keeps for every job:
        jobs that differ in seed then decode each file once
        (docs/deploy.md, "Jobs with different seeds").
      seed: seed of the order and of every augmentation.
      shuffle, drop_last: as DataLoader's.
      shuffle_window_shards: with ``shuffle``, 0 (default) shuffles every
        sample of the dataset; K > 0 is the shard-aware shuffle of a
        TAR_SHARDS dataset: each epoch permutes the shards and draws
        samples from a sliding window of K shards, so at most K shards are
        being read at any time (docs/datasets.md, "Shard-aware shuffle").
        The daemon refuses it on a dataset without shards.
      repeats: repeated augmentation (torchvision's ``--ra-sampler
        --ra-reps``): 0 or 1 (default) none; R > 1 repeats each image of
        the epoch's order R times in a row, spread over consecutive ranks,
        each repeat with its own augmentation draws; an epoch keeps the
        dataset's sample count of that order rounded down to a multiple of
        256 (about N / R distinct images), as RASampler does
        (docs/augment.md). With ``decoded_max_side`` and a daemon's decoded
        cache, an image is decoded once for all its repeats.
      rank, world_size: this process's shard (DistributedSampler semantics).
        Default: torch.distributed's when initialised, else the RANK and
        WORLD_SIZE environment variables, else 0 and 1.
      prefetch: ring slots, i.e. batches read ahead, including those whose
        tensors are alive. Memory: ``prefetch * slot_bytes``. ``"auto"``
        starts at 4 and grows the ring (never shrinks it) while waits are
        bursty but most steps find their batch ready, up to
        ``prefetch_memory`` bytes of slots (docs/autoscaling.md);
        :meth:`stats` says how many slots are in use (``prefetch``).
      prefetch_memory: the cap of ``prefetch="auto"``, bytes (default
        1 GiB).
      epochs: how many epochs the trainer runs (epochs 0..epochs-1), when
        it knows. While an epoch ends, free slots already ask for the next
        epoch's first batches, so the next epoch starts without waiting;
        with ``epochs`` nothing past the last is read ahead. None (default):
        no limit, and up to ``prefetch`` batches are built for nothing
        after the last epoch.
      shared_memory: with one ``unix:`` or loopback endpoint, let the
        daemon's workers decode straight into this process's ring (a sealed
        memfd shared with the daemon; pinned on the device backend), so no
        pixel crosses the socket. Falls back to bytes, with one log line,
        when the daemon declines; ``stats()["transport"]`` says which is in
        use. False: bytes always. Tensors from a slot live by the same
        rules either way.
      device: where tensors are yielded. ``"cpu"``: uint8 tensors wrapping the
        slot (float when ``normalize`` or a float ``dtype`` is given).
        ``"cuda[:n]"``: device tensors, copied asynchronously on the current
        stream and normalised there.
      normalize: ``(mean, std)`` per channel in 0..1 units, as torchvision's
        ``Normalize`` after ``ToTensor``; or None for raw pixels.
      dtype: float dtype of normalised output (default torch.float32). A float
        dtype without ``normalize`` gives pixels scaled to 0..1 (ToTensor).
      job: job name for the daemon's fair sharing and metrics. A daemon
        with tokens bound to jobs checks it against the token.
      tls_ca: path of the PEM bundle of the CA that signed the daemons'
        certificates: connect with TLS. None (default): plaintext.
        ``"unix:"`` endpoints are always plaintext, as the daemon serves them.
      tls_cert, tls_key: this client's PEM certificate and key, for daemons
        that require client certificates (mutual TLS).
      tls_server_name: the name the daemons' certificates are checked
        against, when it is not the endpoint's host.
      token_file: a file whose first line is the bearer token the daemons
        require. None (default): the ``BATCHD_TOKEN`` environment variable,
        if set. There is no argument for the token itself, so that it never
        appears on a command line.
      connect_timeout: seconds to wait for the first daemon and its answer.
      unavailable_timeout: seconds with no daemon up before iteration raises
        :class:`batchd.errors.UnavailableError` naming each daemon and its
        last error (a lost daemon is retried, with backoff, until then).
      hedge_factor: a batch outstanding longer than this multiple of the
        recent median is asked of a second daemon too (first answer wins);
        0 turns hedging off. Only with two or more daemons up.
      batch_progress_timeout: seconds a batch may make no progress on its
        daemon (a daemon frozen mid-batch) before its daemon's stream is
        dropped and the batch asked of another; 0 turns it off. Only with
        two or more daemons up.
      backend: ``"auto"``, ``"host"`` or ``"device"``. ``"device"`` uses the
        C++ DeviceLoader (pinned ring, copy stream, normalisation kernel on
        a GPU; its C++ CPU normaliser without one); ``"host"`` the plain
        ring with torch doing the copy and normalisation; ``"auto"`` picks
        ``"device"`` for a CUDA ``device`` when the module has it and CUDA
        is usable from C++, else ``"host"``.
      fields: members sent with each sample beside its image, e.g.
          ``["txt"]``, ``["txt", "json", "__key__"]``, or ``(name,
          max_bytes)`` pairs / a dict name -> max_bytes (default bounds:
          4096 txt, 16384 json). The loader then yields ``(images, texts)``
          for one field (``(images, f1, f2, ...)`` for several): texts as
          ``str``, json as parsed objects (``None`` if empty or cut),
          ``__key__`` as ``str``, other extensions as ``bytes``. A member
          over its bound is cut at a UTF-8 character boundary;
          ``field_counts`` says how many per batch (docs/datasets.md).
      missing_fields: a sample without a requested field gets an empty
          value (``"empty"``, counted) or is replaced whole by another
          sample (``"substitute"``).
      label_field: ``None`` (the dataset's labels; -1 for shards without
          cls), ``"json:<key>"`` (an integer in the json member, -1 where
          absent) or ``"none"`` (all -1).
      batch_format: ``"tuple"`` (default) or ``"dict"``: ``{"image":
          tensor, "label": tensor, "<field>": [...]}``.
      depth: output slots of the ``"device"`` backend (batches whose
        tensors may be alive at once; 2-3 keep one copying while one is
        used). None: the DeviceLoader's default (3).
      report: what to do with each epoch's one-line diagnosis (see
        :meth:`diagnose`) when the epoch's iteration ends: a callable taking
        the line; None (default) logs it at INFO on the ``"batchd"`` logger;
        False does nothing. :attr:`epoch_diagnosis` has the line either way.

    Raises :class:`batchd.errors.BatchdError` (a subclass per status code)
    with the daemon's message when the plan is refused or the daemon cannot
    be reached.
    """

    def __init__(self, endpoint, dataset=None, batch_size=None, *,
                 sources=None, samples_per_epoch=0,
                 mode=_DEFAULTS.mode, size=_DEFAULTS.size, scale=None,
                 ratio=None, flip=None, resize_shorter=None,
                 interpolation=_DEFAULTS.interpolation, augment=None,
                 erasing=None, mix=None, views=None, layout=_DEFAULTS.layout,
                 decoded_max_side=_DEFAULTS.decoded_max_side,
                 seed=_DEFAULTS.seed, shuffle=_DEFAULTS.shuffle,
                 shuffle_window_shards=_DEFAULTS.shuffle_window_shards,
                 repeats=_DEFAULTS.repeats,
                 drop_last=_DEFAULTS.drop_last, rank=None, world_size=None,
                 prefetch=_DEFAULTS.prefetch,
                 prefetch_memory=_DEFAULTS.auto_prefetch_max_bytes,
                 epochs=None, shared_memory=_DEFAULTS.shared_memory,
                 device="cpu", normalize=None, dtype=None, job=_DEFAULTS.job,
                 connect_timeout=_DEFAULTS.connect_timeout,
                 unavailable_timeout=_DEFAULTS.unavailable_timeout,
                 hedge_factor=_DEFAULTS.hedge_factor,
                 batch_progress_timeout=_DEFAULTS.batch_progress_timeout,
                 backend="auto", fields=None, missing_fields="empty",
                 label_field=None, batch_format="tuple",
                 depth=None, report=None, tls_ca=None, tls_cert=None,
                 tls_key=None, tls_server_name=None, token_file=None):
        import torch

        self._native = None
        if batch_size is None:
            raise TypeError("Loader needs batch_size")
        if (dataset is None) == (sources is None):
            raise ValueError("give a dataset or sources (a weighted mixture "
                             "of datasets), not both and not neither")
        if not isinstance(endpoint, str):
            endpoint = ",".join(endpoint)
        self._set_report(report)
        if rank is None or world_size is None:
            default_rank, default_world_size = (
                _connection.default_rank_world_size())
            rank = default_rank if rank is None else rank
            world_size = default_world_size if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank {rank} is outside 0..world_size-1 (world_size "
                f"{world_size})")
        auto_prefetch = prefetch == "auto"
        if auto_prefetch:
            if not (isinstance(prefetch_memory, int) and prefetch_memory > 0):
                raise ValueError(f"prefetch_memory must be a positive number "
                                 f"of bytes, not {prefetch_memory!r}")
            prefetch = _DEFAULTS.prefetch
        elif isinstance(prefetch, str) or prefetch < 1:
            raise ValueError(f"prefetch must be >= 1 or \"auto\", not "
                             f"{prefetch!r}")
        if epochs is not None and not (isinstance(epochs, int) and epochs >= 1):
            raise ValueError(f"epochs must be a positive int or None, not "
                             f"{epochs!r}")
        self.device = torch.device(device)
        self.layout = layout
        self.rank = rank
        self.world_size = world_size
        sources = None if sources is None else _mixture.parse_sources(sources)
        if (isinstance(samples_per_epoch, bool) or
                not isinstance(samples_per_epoch, int) or
                not 0 <= samples_per_epoch <= 2**32):
            raise ValueError(f"samples_per_epoch must be an int in "
                             f"0..2^32 (0: the sources' sizes summed), not "
                             f"{samples_per_epoch!r}")
        self.samples_per_epoch = samples_per_epoch
        # A mixture (Plan.sources): its weights and where its sources stand.
        self._mixture = (None if sources is None else
                         _mixture.Mixture(sources, samples_per_epoch))
        self.dataset = "" if dataset is None else dataset
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.shuffle_window_shards = shuffle_window_shards
        self.repeats = repeats
        self.drop_last = drop_last
        self._output = _output.TensorOutput(self.device, layout, normalize,
                                            dtype)
        self._fields = _fields.parse_fields(fields)
        if batch_format not in ("tuple", "dict"):
            raise ValueError(f"batch_format must be 'tuple' or 'dict', not "
                             f"{batch_format!r}")
        self.batch_format = batch_format
        #: Per requested field, (cut, missing) counts of the batch yielded
        #: last.
        self.field_counts = []
        augment_text = "\n".join(
            text for text in (_augment.to_text(augment or []),
                              _erase_mix.plan_text(erasing, mix)) if text)
        views_text = _views.to_text(views)
        #: With views: the ViewGroups; each batch's images are a list of
        #: tensors, one per view in group order.
        self.views = list(views) if views_text else []
        backend = _backend.for_plan(backend, self.views, augment, erasing, mix,
                                    mode, self._output.float_dtype)

        args = LoaderArgs(
            endpoint=endpoint, dataset=self.dataset, batch_size=batch_size,
            seed=seed, shuffle=shuffle,
            shuffle_window_shards=shuffle_window_shards, repeats=repeats,
            drop_last=drop_last, rank=rank,
            world_size=world_size, job=job, mode=mode, size=size,
            scale=None if scale is None else tuple(scale),
            ratio=None if ratio is None else tuple(ratio), flip=flip,
            resize_shorter=resize_shorter or 0,
            interpolation=getattr(interpolation, "value", interpolation),
            augment=augment_text, views=views_text, layout=layout,
            decoded_max_side=decoded_max_side,
            prefetch=prefetch, auto_prefetch=auto_prefetch,
            auto_prefetch_max_bytes=prefetch_memory,
            last_epoch=None if epochs is None else epochs - 1,
            shared_memory=bool(shared_memory),
            sample_fields=self._fields, missing_fields=missing_fields,
            label_field=label_field or "",
            connect_timeout=connect_timeout,
            unavailable_timeout=unavailable_timeout,
            hedge_factor=hedge_factor,
            batch_progress_timeout=batch_progress_timeout,
            security=_connection.security_args(
                tls_ca, tls_cert, tls_key, tls_server_name, token_file))
        _backend.check(backend)
        self._open_native = lambda args: self._open(args, backend, normalize,
                                                    depth)
        self._args = args
        if self._mixture is not None:
            self._mixture.set_plan(args)
        self._open_native(args)
        self.endpoint = endpoint
        # The epoch (and first batch) the next __iter__ starts.
        self._epoch = 0
        self._start = 0
        # Position of the current (or last) iteration: (epoch, next batch to
        # yield), or None when none ran since set_epoch / load_state_dict.
        self._position = None
        self._generation = 0
        # Time spent waiting for batches, and batches yielded.
        self.waited_s = 0.0
        self.batches = 0
        #: Dataset indices of the samples of the batch yielded last, in
        #: order (what an exactly-once check or a debugger wants), and with
        #: ``repeats`` which repeat of its image each is (else empty).
        self.sample_indices = []
        self.sample_repeats = []
        #: With ``sources``: the dataset each sample of the batch yielded
        #: last came from (``sample_indices`` are then indices in it).
        self.sample_sources = []
        #: What the daemon drew for the batch yielded last (device backend):
        #: ``(rects, mix)``, rects ``[(position, top, left, height, width,
        #: noise, noise_key)]``, mix None or ``(kind, lambda, (top, left,
        #: height, width), label_smoothing, num_classes)``.
        self.erase_mix = ([], None)

    def _open(self, args, backend, normalize, depth):
        """Opens the stream of `args` as self._native, on `backend`."""
        # What stays if the open raises: closed, on "host".
        self._native = None
        self.backend = "host"
        self._native, self.backend = _backend.open_native(
            args, backend, self._output, normalize, depth)
        # The plan's figures: batches of a whole epoch, the length of an
        # epoch's global order, and the elastic resume the stream was
        # opened with.
        self._length = self._native.batches_per_epoch
        if self.sources is not None:
            self._samples = (self.samples_per_epoch or
                             self._native.dataset_samples)
        else:
            self._samples = _epoch_length(self._native.dataset_samples,
                                          self.repeats)
        self._resume = (args.resume_epoch, args.resume_position)
        self._resumed_length = self._native.resumed_epoch_batches

    def _batches_in(self, epoch):
        """Batches of `epoch` for this rank: fewer in a resumed epoch."""
        if self._resume[1] > 0 and epoch == self._resume[0]:
            return self._resumed_length
        return self._length

    # -- DataLoader / DistributedSampler surface ---------------------------

    def __len__(self):
        """Batches of the current epoch for this rank (after drop_last):
        fewer than a whole epoch's in an epoch resumed on another world size
        (:meth:`load_state_dict`)."""
        return self._batches_in(self._epoch)

    def set_epoch(self, epoch):
        """Sets the epoch the next iteration streams, as DistributedSampler's.

        Without it every iteration repeats the same epoch (same order and
        augmentation). A position loaded by load_state_dict() for this epoch
        is kept; for another epoch the iteration starts at batch 0.

        Raises TypeError unless `epoch` is an int, ValueError unless it is
        in 0..2^32-1 (the epochs the daemon serves).
        """
        epoch = _check_epoch(epoch)
        if epoch != self._epoch:
            self._start = 0
            self._position = None
        self._epoch = epoch

    @property
    def epoch(self):
        return self._epoch

    def __iter__(self):
        native = self._require_open()
        epoch, first = self._epoch, self._start
        native.start_epoch(epoch, first)
        self._start = 0
        self._position = (epoch, first)
        self._generation += 1
        return self._iterate(native, epoch, self._generation)

    def _iterate(self, native, epoch, generation):
        while True:
            if generation != self._generation:
                raise RuntimeError("this iterator was replaced by a newer "
                                   "iter() of the same Loader")
            started = time.perf_counter()
            batch = _backend.next_batch(native, self.backend, self._output)
            self.waited_s += time.perf_counter() - started
            if batch is None:
                self._end_of_epoch(native)
                return
            self._position = (epoch, self._position[1] + 1)
            self.batches += 1
            self.sample_indices = batch.sample_indices
            self.sample_repeats = batch.repeats
            if self.sources is not None:
                self.sample_sources = [self.sources[s].dataset
                                       for s in batch.sources]
            if self.backend == "device":
                self.erase_mix = batch.erase_mix
            # The frame keeps no reference to what it yields (no local names
            # it): the slot is the consumer's to free.
            box = [batch]
            del batch
            yield self._to_tensors(box.pop())

    def _to_tensors(self, batch):
        out, counts = _output.to_tensors(batch, self._output, self.backend,
                                         self._fields, self.batch_format,
                                         self.views)
        if counts is not None:
            self.field_counts = counts
        return out

    # -- Mixtures -----------------------------------------------------------

    @property
    def sources(self):
        """The mixture's sources (:class:`batchd.Source`), with the weights
        in effect; None without ``sources``."""
        return None if self._mixture is None else self._mixture.sources

    def set_weights(self, weights, epoch=None):
        """Changes the mixture's weights from the start of `epoch` on,
        without restarting the job or the daemons: each source's stream
        continues where the old weights left it at that epoch.

        `weights`: one number per source in the order of ``sources``, a
        dict ``{dataset: weight}`` naming every source, or a list of
        ``(dataset, weight)`` with the same datasets in the same order.
        `epoch` defaults to the epoch the next iteration starts: the
        current one if no iteration of it has begun, else the next (call
        it between epochs, before or after :meth:`set_epoch`).

        Raises ValueError on a loader without sources, weights that do not
        name the sources, a weight not finite or <= 0, or an epoch
        already under way or before the weights last set.
        """
        if self._mixture is None:
            raise ValueError("set_weights needs a Loader over sources (a "
                             "weighted mixture)")
        started = self._position is not None and self._position[0] == \
            self._epoch and self._position[1] > 0
        self._mixture.set_weights(weights, epoch, self._samples, self._epoch,
                                  started)
        self._mixture.set_plan(self._args)
        self.close()
        self._open_native(self._args)

    # -- Checkpoints --------------------------------------------------------

    def state_dict(self):
        """Where the stream is: resuming from it gives exactly the batches
        the uninterrupted run would have given next, on this world size or
        (through ``position``) on any other.

        ``next_batch`` counts the batches this loader has yielded in the
        current epoch; save it after the step that consumed the last one.
        ``epoch_start`` is where this epoch started in its global order (0,
        or an elastic resume's position). ``position`` follows from them:
        the epoch's global position every rank has reached together when
        the ranks run in lockstep (as DDP does), that is the samples of the
        epoch's global order consumed by all ranks, or ``samples`` (the
        dataset's size) once the epoch is done. :func:`merge_states` checks
        that the ranks' states agree.
        """
        if self._position is not None:
            epoch, next_batch = self._position
        else:
            epoch, next_batch = self._epoch, self._start
        start = self._resume[1] if epoch == self._resume[0] else 0
        position = _global_position(self._samples, start, next_batch,
                                    self._batches_in(epoch), self.batch_size,
                                    self.world_size)
        state = {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "next_batch": next_batch,
            "epoch_start": start,
            "position": position,
            "samples": self._samples,
            "dataset": self.dataset,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_window_shards": self.shuffle_window_shards,
            "repeats": self.repeats,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            "batches_per_epoch": self._length,
        }
        if self._mixture is not None:
            # Where each source stands at the start of the epoch: with the
            # position, what a resume needs (the weights may have changed
            # since the job started, so the plan alone cannot say).
            state["sources"] = self._mixture.state(epoch, self._samples)
        return state

    def load_state_dict(self, state):
        """Makes the next iteration start where ``state`` was taken, and
        returns (and logs at INFO on the ``"batchd"`` logger) one line
        saying what it did.

        ``state`` may come from any world size (elastic resume): every
        sample of the epoch not yet consumed by the old ranks together is
        delivered exactly once over the new ones, plus the new world's
        padding (repeats of the epoch's head, as DistributedSampler pads).
        With the same world size and batch size it resumes at the same
        batch, with the same bytes. The per-rank batch size may change
        with the world size if the global batch (``batch_size *
        world_size``) stays the same.

        Raises TypeError when ``state`` is not a dict or one of its fields
        has the wrong type (an epoch of 1.9, a drop_last of "no"), and
        ValueError when a field is missing or out of range (an epoch past
        2^32-1, a world_size of 0) or ``state`` is from another plan
        (dataset, seed, shuffle, shuffle_window_shards, batch size); each
        error names the field and what it may be (batchd.state.check_state).
        Nothing changes when it raises.
        """
        epoch, position, old_world = _resume_point(
            state, plan={"dataset": self.dataset, "seed": self.seed,
                         "shuffle": self.shuffle,
                         "shuffle_window_shards": self.shuffle_window_shards,
                         "repeats": self.repeats,
                         "samples": self._samples,
                         **({} if self.sources is None else
                            {"sources": [s.dataset for s in self.sources]})},
            batch_size=self.batch_size, world_size=self.world_size,
            drop_last=self.drop_last)
        line = (f"resuming epoch {epoch} at sample {position:,} of "
                f"{self._samples:,} on {self.world_size} ranks, was "
                f"{old_world}")
        reopen = False
        if self._mixture is not None and self._mixture.load_state(
                state["sources"], epoch, self._samples):
            self._mixture.set_plan(self._args)
            reopen = True
        self._seek(epoch, position, reopen)
        _logger.info("%s", line)
        return line

    def _seek(self, epoch, position, reopen=False):
        """Next iteration: `epoch` from global position `position`, through
        the open stream when a batch boundary of its plan falls there, else
        (or with `reopen`: the plan's sources changed) through a stream
        reopened with an elastic resume."""
        start = self._resume[1] if epoch == self._resume[0] else 0
        step = self.batch_size * self.world_size
        if reopen:
            self.close()
            self._args.resume_epoch = epoch
            self._args.resume_position = (
                position if position < self._samples else 0)
            self._open_native(self._args)
            self._epoch, self._start = epoch, (
                0 if position < self._samples else
                self._batches_in(epoch))
        elif position == self._samples:
            self._epoch, self._start = epoch, self._batches_in(epoch)
        elif position >= start and (position - start) % step == 0:
            self._epoch, self._start = epoch, (position - start) // step
        else:
            self.close()
            self._args.resume_epoch = epoch
            self._args.resume_position = position
            self._open_native(self._args)
            self._epoch, self._start = epoch, 0
        self._position = None

    def close(self):
        """Ends the stream. Tensors already yielded stay valid. Idempotent."""
        native, self._native = self._native, None
        if native is not None:
            self._output.reap(wait=True)
            native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass
