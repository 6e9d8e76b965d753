"""Weighted mixtures of datasets (batchd.v1.Plan.sources): the sources'
check, and the arithmetic of each source's quota and cursor, the same
integers the daemon computes (common/mixture.h; docs/datasets.md,
"Mixtures").

Each source has a stream of passes over its dataset that continues across
epochs; its cursor is how many samples of that stream were consumed before
an epoch. An epoch of ``samples_per_epoch`` samples takes ``quota`` from
each source, split by weight. A Loader over sources keeps its weights and
cursors in a :class:`Mixture`.
"""
import collections
import math
import numbers

from .state import check_epoch

#: The most sources a plan may mix (common::kMaxMixtureSources).
MAX_SOURCES = 64
#: The largest cursor a plan may carry (server/plan/plan_sources.h).
MAX_CURSOR = 2**62
_WEIGHT_UNITS = 4294967296.0  # 2^32: weights in units of the largest


class Source(collections.namedtuple("Source", ("dataset", "weight"))):
    """One dataset of a mixture and its weight (its share of each epoch,
    relative to the other sources'): ``batchd.Source("laion", 0.7)``."""


def _check_weight(weight, where):
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f"{where} weight must be a number, not "
                        f"{type(weight).__name__} {weight!r}")
    weight = float(weight)
    if not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"{where} weight is {weight!r}; it must be finite "
                         f"and > 0")
    return weight


def parse_sources(sources):
    """``sources`` (``[("laion", 0.7), ...]``, :class:`Source` or dicts
    ``{"dataset": ..., "weight": ...}``) as a list of :class:`Source`.
    TypeError or ValueError, naming the entry, for anything else: no
    sources, more than 64, a dataset named twice, a weight not finite or
    <= 0."""
    if isinstance(sources, (str, bytes)) or not isinstance(
            sources, collections.abc.Iterable):
        raise TypeError(f"sources must be a list of (dataset, weight), not "
                        f"{type(sources).__name__}")
    out = []
    for i, entry in enumerate(sources):
        where = f"sources[{i}]"
        if isinstance(entry, collections.abc.Mapping):
            entry = (entry.get("dataset"), entry.get("weight"))
        if (isinstance(entry, (str, bytes)) or
                not isinstance(entry, collections.abc.Sequence) or
                len(entry) != 2):
            raise TypeError(f"{where} must be a (dataset, weight) pair, not "
                            f"{entry!r}")
        dataset, weight = entry
        if not isinstance(dataset, str) or not dataset:
            raise TypeError(f"{where} dataset must be a non-empty str, not "
                            f"{dataset!r}")
        out.append(Source(dataset, _check_weight(weight, where)))
    if not 1 <= len(out) <= MAX_SOURCES:
        raise ValueError(f"sources has {len(out)} entries; a mixture has "
                         f"1..{MAX_SOURCES}")
    names = [s.dataset for s in out]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"sources names dataset {name!r} twice; name "
                             f"each once and add up its weights")
    return out


def reweighted(sources, weights):
    """`sources` (parsed Sources) with new `weights`: one number per source
    in their order, a dict {dataset: weight} naming every source, or a list
    of (dataset, weight) with the same datasets in the same order.
    ValueError naming what is wrong otherwise (Loader.set_weights)."""
    names = [s.dataset for s in sources]
    if isinstance(weights, dict):
        if sorted(weights) != sorted(names):
            raise ValueError(f"set_weights names {sorted(weights)}; "
                             f"the sources are {names}")
        weights = [(name, weights[name]) for name in names]
    else:
        weights = list(weights)
        if not all(isinstance(w, (tuple, list, Source))
                   for w in weights):
            if len(weights) != len(names):
                raise ValueError(f"set_weights got {len(weights)} "
                                 f"weights for the {len(names)} "
                                 f"sources {names}")
            weights = list(zip(names, weights))
    new = parse_sources(weights)
    if [s.dataset for s in new] != names:
        raise ValueError(f"set_weights needs one weight for each of "
                         f"the sources {names}, in that order")
    return new


def quantize_weights(weights):
    """Each weight in 2^-32 units of the largest, at least 1
    (common::QuantizeWeights: the same double operations)."""
    largest = max(weights)
    return [max(1, int(math.floor(w / largest * _WEIGHT_UNITS + 0.5)))
            for w in weights]


def quotas(weights, samples_per_epoch):
    """Samples of each source in an epoch: the largest-remainder split of
    `samples_per_epoch` by the quantized weights (common::MixtureQuotas)."""
    units = quantize_weights(weights)
    total = sum(units)
    out = [samples_per_epoch * u // total for u in units]
    remainders = sorted(((samples_per_epoch * u % total, s)
                         for s, u in enumerate(units)),
                        key=lambda r: (-r[0], r[1]))
    for i in range(samples_per_epoch - sum(out)):
        out[remainders[i][1]] += 1
    return out


def cursors_at(weights, cursors, cursors_epoch, samples_per_epoch, epoch):
    """Each source's cursor at the start of `epoch`, for a plan whose
    sources stand at `cursors` at `cursors_epoch` (common::CursorsAt)."""
    out = []
    for cursor, quota in zip(cursors, quotas(weights, samples_per_epoch)):
        if epoch >= cursors_epoch:
            out.append(cursor + (epoch - cursors_epoch) * quota)
        else:
            out.append(max(0, cursor - (cursors_epoch - epoch) * quota))
    return out


def check_state_sources(value):
    """A state_dict's ``sources``: ``[[dataset, weight, cursor], ...]``
    checked; TypeError or ValueError naming the entry."""
    if isinstance(value, (str, bytes)) or not isinstance(
            value, collections.abc.Sequence):
        raise TypeError(f"state_dict sources must be a list of [dataset, "
                        f"weight, cursor], not {type(value).__name__}")
    out = []
    for i, entry in enumerate(value):
        where = f"state_dict sources[{i}]"
        if (isinstance(entry, (str, bytes)) or
                not isinstance(entry, collections.abc.Sequence) or
                len(entry) != 3):
            raise TypeError(f"{where} must be [dataset, weight, cursor], "
                            f"not {entry!r}")
        dataset, weight, cursor = entry
        if not isinstance(dataset, str) or not dataset:
            raise TypeError(f"{where} dataset must be a non-empty str, not "
                            f"{dataset!r}")
        weight = _check_weight(weight, where)
        if isinstance(cursor, bool) or not isinstance(cursor,
                                                      numbers.Integral):
            raise TypeError(f"{where} cursor must be an int (0..2^62), not "
                            f"{type(cursor).__name__} {cursor!r}")
        if not 0 <= int(cursor) <= MAX_CURSOR:
            raise ValueError(f"{where} cursor {int(cursor)} is outside "
                             f"0..2^62")
        out.append([dataset, weight, int(cursor)])
    parse_sources([(d, w) for d, w, _ in out])
    return out


class Mixture:
    """A Loader's mixture: the sources with the weights in effect, and where
    they stand: each source's cursor at the start of the epoch the weights
    were last set at (every other epoch's follow from the quotas). What the
    plan, set_weights, state_dict and load_state_dict need of it. Not
    thread-safe: one per Loader."""

    def __init__(self, sources, samples_per_epoch):
        """`sources` as parse_sources gives them; `samples_per_epoch` the
        plan's (0: the sources' sizes summed)."""
        self.sources = sources
        self.samples_per_epoch = samples_per_epoch
        # The sources stand at `_cursors` at the start of `cursors_epoch`.
        self._cursors = [0] * len(sources)
        self.cursors_epoch = 0

    def set_plan(self, args):
        """Writes the sources, their cursors and samples_per_epoch into
        `args` (LoaderArgs)."""
        args.sources = [(s.dataset, s.weight, c)
                        for s, c in zip(self.sources, self._cursors)]
        args.samples_per_epoch = self.samples_per_epoch
        args.sources_epoch = self.cursors_epoch

    def cursors(self, epoch, samples):
        """Each source's cursor at the start of `epoch` under the plan, with
        epochs of `samples` samples."""
        return cursors_at([s.weight for s in self.sources], self._cursors,
                          self.cursors_epoch, samples, epoch)

    def set_weights(self, weights, epoch, samples, current, started):
        """Loader.set_weights: the new `weights` (reweighted) from the start
        of `epoch`, None for the epoch the next iteration starts (`current`,
        or the next one when `started`: an iteration of it has begun).
        TypeError or ValueError, changing nothing, for weights that do not
        name the sources or an epoch under way or before the weights last
        set."""
        new = reweighted(self.sources, weights)
        if epoch is None:
            epoch = current + 1 if started else current
        epoch = check_epoch(epoch)
        if epoch < self.cursors_epoch or (started and epoch <= current):
            raise ValueError(f"set_weights for epoch {epoch}: the weights "
                             f"can change at an epoch not yet started "
                             f"(epoch {current} is "
                             f"{'under way' if started else 'next'}, the "
                             f"weights were last set at epoch "
                             f"{self.cursors_epoch})")
        self._cursors = self.cursors(epoch, samples)
        self.cursors_epoch = epoch
        self.sources = new

    def state(self, epoch, samples):
        """A state_dict's ``sources`` at the start of `epoch`: ``[[dataset,
        weight, cursor], ...]``."""
        return [[s.dataset, s.weight, c]
                for s, c in zip(self.sources, self.cursors(epoch, samples))]

    def load_state(self, value, epoch, samples):
        """Takes a state_dict's ``sources`` (`value`, taken at `epoch`):
        True when its weights or cursors differ from the plan's, which then
        become the state's (the stream must reopen). TypeError or
        ValueError (check_state_sources), changing nothing, for a bad
        `value`."""
        state_sources = check_state_sources(value)
        weights = [w for _, w, _ in state_sources]
        cursors = [c for _, _, c in state_sources]
        if (weights == [s.weight for s in self.sources] and
                cursors == self.cursors(epoch, samples)):
            return False
        self.sources = [Source(d, w) for d, w, _ in state_sources]
        self._cursors, self.cursors_epoch = cursors, epoch
        return True
