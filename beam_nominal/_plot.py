"""``beam-nominal inspect --plot``: a picture of stored channels (needs the ``plot`` extra, matplotlib).

One panel per channel, time (UTC) on the x axis shared by all panels, one line per tag set:

* numbers (double, int64, uint64): a line; integers as steps (a counter holds its value);
* strings: state bands, one row per tag set, a colour per state, labelled where there is room;
* double arrays: the mean of each array, as a line (labelled so);
* string arrays and structs: a tick per point (the values do not plot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["plot_series"]


def _label(tags: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tags.items())) or "(no tags)"


def _times(ts: np.ndarray) -> np.ndarray:
    # Nanoseconds to numpy datetime64 (matplotlib's dates), exactly at microsecond resolution.
    return ts.astype("datetime64[ns]")


def plot_series(store: Any, series: Sequence[Any], path: str, title: str | None = None) -> int:
    """Draw ``series`` (SeriesInfo of one or more channels) from ``store`` into the PNG ``path``.

    Returns:
        The number of panels (channels) drawn.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'beam-nominal[plot]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "inspect --plot needs matplotlib: pip install 'beam-nominal[plot]' (or pip install matplotlib)"
        ) from exc

    channels: dict[str, list[Any]] = {}
    for s in series:
        channels.setdefault(s.channel, []).append(s)
    n = len(channels)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.2 + 1.9 * n), sharex=True, squeeze=False)
    for ax, (channel, members) in zip(axes[:, 0], channels.items(), strict=True):
        vt = members[0].value_type.value
        if vt == "string":
            _bands(ax, store, members)
        else:
            for s in members:
                table = store.read(s.dataset_rid, s.channel, s.tags)
                ts = _times(np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64))
                label = _label(s.tags)
                if vt in ("double", "int64", "uint64"):
                    vals = np.asarray(table.column("value").to_numpy(zero_copy_only=False))
                    if vt == "double":
                        ax.plot(ts, vals, lw=0.9, label=label)
                    else:
                        ax.step(ts, vals.astype(np.float64), where="post", lw=0.9, label=label)
                elif vt == "double_array":
                    means = [float(np.mean(v)) if len(v) else np.nan for v in table.column("value").to_pylist()]
                    ax.plot(ts, means, lw=0.9, label=f"{label} (mean of array)")
                else:
                    ax.plot(ts, np.zeros(len(ts)), "|", label=f"{label} ({vt}, one tick per point)")
                    ax.set_yticks([])
            if len(members) > 1 or members[0].tags:
                ax.legend(loc="upper right", fontsize=7, framealpha=0.6)
        ax.set_ylabel(f"{channel}\n({vt})", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("time (UTC)")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return n


def _bands(ax: Any, store: Any, members: Sequence[Any]) -> None:
    """String series as state bands: one row per tag set, one colour per distinct state."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    colours = [plt.get_cmap("tab20")(i) for i in range(20)]
    palette: dict[str, Any] = {}
    rows = []
    for row, s in enumerate(members):
        table = store.read(s.dataset_rid, s.channel, s.tags)
        ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64)
        vals = table.column("value").to_pylist()
        rows.append(_label(s.tags))
        if not len(ts):
            continue
        # A state lasts until the next point; the last one gets the median step (or 1 s).
        steps = np.diff(ts)
        tail = int(np.median(steps)) if steps.size else 10**9
        ends = np.r_[ts[1:], ts[-1] + max(tail, 1)]
        start = 0
        for i in range(1, len(vals) + 1):
            if i < len(vals) and vals[i] == vals[start]:
                continue
            state = vals[start]
            colour = palette.setdefault(state, colours[len(palette) % len(colours)])
            t0, t1 = _times(ts[start : start + 1])[0], _times(ends[i - 1 : i])[0]
            ax.barh(row, t1 - t0, left=t0, height=0.8, color=colour, edgecolor="none")
            if (ends[i - 1] - ts[start]) * 12 > (ends[-1] - ts[0]):  # wide enough for its name
                mid = t0 + (t1 - t0) / 2
                ax.text(mid, row, str(state)[:16], ha="center", va="center", fontsize=7)
            start = i
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    if palette:
        handles = [Rectangle((0, 0), 1, 1, color=c) for c in palette.values()]
        ax.legend(handles, [str(k)[:16] for k in palette], loc="upper right", fontsize=6, ncol=min(len(palette), 8))
