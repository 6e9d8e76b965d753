"""The trainer-side step timeline: where each step's time went.

:meth:`batchd.Loader.timeline` returns the last finished steps (at most
1,024) as a dict of equal-length lists; :func:`plot` draws them, one bar per
step over the run's time, so that one picture shows the stretches where
the trainer waited for input (input-bound) and those where it computed
(compute-bound). Needs matplotlib (Debian: ``python3-matplotlib``) only to
draw.
"""

#: The keys of a timeline, each a list with one entry per step.
KEYS = ("epoch", "batch", "start_s", "wait_s", "copy_s", "compute_s",
        "ring_copy_s")

# Colours of the three parts of a step.
_COLOURS = {"wait_s": "tab:red", "copy_s": "tab:orange",
            "compute_s": "tab:green"}


def summary(timeline):
    """Totals of a timeline: ``steps``, ``wall_s`` (first step's start to
    the last one's end), ``wait_s``, ``copy_s``, ``compute_s`` and
    ``wait_fraction`` (of ``wall_s``)."""
    steps = len(timeline["start_s"])
    if steps == 0:
        return {"steps": 0, "wall_s": 0.0, "wait_s": 0.0, "copy_s": 0.0,
                "compute_s": 0.0, "wait_fraction": 0.0}
    end = (timeline["start_s"][-1] + timeline["wait_s"][-1] +
           timeline["copy_s"][-1] + timeline["compute_s"][-1])
    wall = end - timeline["start_s"][0]
    out = {"steps": steps, "wall_s": wall}
    for key in ("wait_s", "copy_s", "compute_s"):
        out[key] = float(sum(timeline[key]))
    out["wait_fraction"] = out["wait_s"] / wall if wall > 0 else 0.0
    return out


def plot(timeline, path, title=None):
    """Draws `timeline` (a :meth:`batchd.Loader.timeline` dict) as a PNG at
    `path`, and returns `path`. Above, the run as one lane: each step's
    wait (red), copy (orange) and compute (green) at its place in time;
    below, each step's parts stacked, in milliseconds, at the same place;
    the title gives the waited share. Uses no pyplot state (a Figure of its
    own), so it leaves a notebook's backend alone. Raises ImportError,
    saying which package to install, without matplotlib."""
    try:
        import matplotlib  # noqa: F401 - the package first, for the message
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as error:
        raise ImportError(
            "batchd.Loader.plot_timeline needs matplotlib: install it "
            "(Debian: apt-get install python3-matplotlib; or pip install "
            "matplotlib)") from error
    totals = summary(timeline)
    t0 = timeline["start_s"][0] if totals["steps"] else 0.0
    figure = Figure(figsize=(10, 5.5))
    lane, steps = figure.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 3]})
    parts = ("wait_s", "copy_s", "compute_s")
    for i, start in enumerate(timeline["start_s"]):
        left = start - t0
        length = sum(timeline[key][i] for key in parts)
        bottom = 0.0
        for key in parts:
            width = timeline[key][i]
            if width > 0:
                lane.broken_barh([(left, width)], (0, 1),
                                 facecolors=_COLOURS[key])
                steps.bar(start - t0, 1e3 * width, width=length,
                          bottom=bottom, align="edge",
                          color=_COLOURS[key], linewidth=0)
            left += width
            bottom += 1e3 * width
    lane.set_yticks([])
    steps.set_ylabel("ms per step")
    steps.set_xlabel("seconds since the first step shown")
    steps.set_xlim(0, max(totals["wall_s"], 1e-3))
    # client/diagnosis.h's kInputBoundWaitFraction.
    verdict = ("input-bound" if totals["wait_fraction"] >= 0.1
               else "compute-bound")
    lane.set_title(title or (
        f"{totals['steps']} steps, {totals['wall_s']:.2f} s: waited "
        f"{100 * totals['wait_fraction']:.1f} % of the time ({verdict})"))
    figure.legend(handles=[Patch(color=_COLOURS[key], label=label)
                           for key, label in zip(parts, ("wait", "copy",
                                                         "compute"))],
                  loc="lower center", ncol=3, frameon=False)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(path, format="png")
    return path
