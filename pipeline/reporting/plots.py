"""The run report's figures: matplotlib, drawn to inline SVG (the page loads nothing and opens
offline), each from the data it shows; pipeline/reporting/page.py places them."""

from __future__ import annotations

import io

TOP_VALUES = 8  # a text feature's most frequent values drawn


def figure(width: float, height: float, columns: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "path", "font.size": 8, "axes.spines.top": False,
                         "axes.spines.right": False, "svg.hashsalt": "lockstep"})
    return plt.subplots(1, columns, figsize=(width, height))


def svg(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.tight_layout()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def counts(ax, axis) -> None:
    """Counts in few ticks, as 20k or 1.5M, so they never run together."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    axis = ax.xaxis if axis == "x" else ax.yaxis
    axis.set_major_locator(MaxNLocator(3, integer=True))
    axis.set_major_formatter(EngFormatter(sep=""))


def histogram(feature) -> str:
    """A feature's distribution from its statistics: a number's histogram, or a text's most
    frequent values."""
    kind = feature.WhichOneof("stats")
    if kind == "num_stats":
        standard = [h for h in feature.num_stats.histograms if h.type == h.STANDARD]
        buckets = standard[0].buckets if standard else []
        if not buckets:
            return ""
        fig, ax = figure(2.6, 1.1)
        ax.bar([b.low_value for b in buckets], [b.sample_count for b in buckets],
               width=[max(b.high_value - b.low_value, 1e-12) for b in buckets], align="edge",
               color="#4c78a8")
        counts(ax, "y")
    else:
        top = list(feature.string_stats.top_values)[:TOP_VALUES]
        if not top:
            return ""
        fig, ax = figure(2.6, 0.45 + 0.15 * len(top))
        labels = [v.value if len(v.value) <= 14 else v.value[:13] + "…" for v in top]
        ax.barh(range(len(top))[::-1], [v.frequency for v in top], color="#f58518", height=0.7)
        ax.set_yticks(range(len(top))[::-1], labels)
        counts(ax, "x")
    ax.tick_params(labelsize=6)
    return svg(fig)


def curves(curves: dict) -> str:
    """The training curve: loss, accuracy or RMSE, and the learning rate, by step."""
    shown = [tag for tag in ("loss", "accuracy", "rmse", "learning_rate") if curves.get(tag)]
    if not shown:
        return ""
    fig, axes = figure(3.4 * len(shown), 2.4, len(shown))
    axes = [axes] if len(shown) == 1 else list(axes)
    for ax, tag in zip(axes, shown):
        steps, values = zip(*curves[tag])
        ax.plot(steps, values, color="#4c78a8", linewidth=1.4)
        ax.set_title(tag.replace("_", " "))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return svg(fig)


def slice_bars(values: list[tuple[str, float]], whole: float | None, metric: str) -> str:
    """A metric by slice, the whole eval split's value dashed."""
    fig, ax = figure(6, 0.35 * len(values) + 0.8)
    ax.barh(range(len(values))[::-1], [v for _, v in values], color="#54a24b")
    ax.set_yticks(range(len(values))[::-1], [n for n, _ in values])
    if whole is not None:
        ax.axvline(whole, color="#333", linestyle="--", linewidth=1)
    ax.set_xlabel(f"{metric} (dashed: the whole eval split)")
    return svg(fig)


def calibration(buckets: list, positive: str) -> str:
    """Predicted probability against the share that is positive, per bucket (dot: examples)."""
    fig, ax = figure(4.2, 3.6)
    ax.plot([0, 1], [0, 1], color="#999", linestyle="--", linewidth=1)
    ax.scatter([b[4] for b in buckets], [b[3] for b in buckets],
               s=[12 + 200 * b[2] / max(x[2] for x in buckets) for b in buckets], color="#4c78a8")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel(f"mean predicted P({positive})")
    ax.set_ylabel(f"share that is {positive}")
    return svg(fig)


def confusion(counts: list[list[float]], names: list[str]) -> str:
    """The confusion matrix as a heat map, actual by predicted."""
    fig, ax = figure(0.5 * len(names) + 2.5, 0.5 * len(names) + 2)
    ax.imshow(counts, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    return svg(fig)


def trend(points: list[dict], metric: str) -> str:
    """The gating metric of each run's model, oldest to newest, and of the serving model on the
    same rows where it was scored."""
    fig, ax = figure(6, 2.6)
    ax.plot(range(len(points)), [v["model"] for v in points], marker="o", color="#4c78a8",
            label="the run's model")
    served = [(i, v["serving"]) for i, v in enumerate(points) if v["serving"] is not None]
    if served:
        ax.plot([i for i, _ in served], [s for _, s in served], marker="s", color="#e45756",
                label="the serving model, on the same rows")
    ax.set_xlabel("run (oldest to newest)")
    ax.set_ylabel(metric)
    ax.legend(loc="best")
    return svg(fig)
