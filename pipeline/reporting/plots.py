"""The run report's figures, each from the data it shows, as inline SVG (svg_chart.py: the page
loads nothing and opens offline); pipeline/reporting/page.py places them."""

from __future__ import annotations

import math

from pipeline.reporting.svg_chart import FONT, Chart, blue, nice_ticks, number, row, text_width

TOP_VALUES = 8  # a text feature's most frequent values drawn
BLUE, ORANGE, GREEN, RED, GREY = "#4c78a8", "#f58518", "#54a24b", "#e45756", "#999"


def _count_ticks(high: float) -> list[tuple[float, str]]:
    """Counts in few ticks, as 20k or 1.5M, so they never run together."""
    return [(v, number(v)) for v in nice_ticks(0, high, 3) if v == int(v)]


def _label(text: str, most: int = 14) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def histogram(feature) -> str:
    """A feature's distribution from its statistics: a number's histogram, or a text's most
    frequent values."""
    kind = feature.WhichOneof("stats")
    if kind == "num_stats":
        standard = [h for h in feature.num_stats.histograms if h.type == h.STANDARD]
        buckets = [b for b in (standard[0].buckets if standard else [])
                   if math.isfinite(b.low_value) and math.isfinite(b.high_value)]
        if not buckets:
            return ""
        most = max(b.sample_count for b in buckets) or 1.0
        low = buckets[0].low_value
        high = max(buckets[-1].high_value, low + 1e-12)
        chart = Chart(250, 106, (low, high), (0, most), margin=(34, 14, 6, 18))
        for b in buckets:
            chart.rect(b.low_value, 0, max(b.high_value, b.low_value + 1e-12 * (high - low)),
                       b.sample_count, BLUE)
        chart.axes(y_ticks=_count_ticks(most))
        return chart.svg()
    top = list(feature.string_stats.top_values)[:TOP_VALUES]
    if not top:
        return ""
    labels = [_label(v.value) for v in top]
    most = max(v.frequency for v in top) or 1.0
    left = 8 + max(text_width(label, 8) for label in labels)
    chart = Chart(250, 24 + 15 * len(top), (0, most), (0, len(top)),
                  margin=(left, 10, 4, 18))
    for i, v in enumerate(top):
        chart.rect(0, len(top) - i - 0.85, v.frequency, len(top) - i - 0.15, ORANGE)
    chart.axes(x_ticks=_count_ticks(most),
               y_ticks=[(len(top) - i - 0.5, label) for i, label in enumerate(labels)])
    return chart.svg()


def curves(curves: dict) -> str:
    """The training curve: loss, accuracy or RMSE, and the learning rate, by step."""
    shown = [tag for tag in ("loss", "accuracy", "rmse", "learning_rate") if curves.get(tag)]
    if not shown:
        return ""
    panels = []
    for tag in shown:
        steps, values = zip(*curves[tag])
        finite = [v for v in values if math.isfinite(v)] or [0.0]
        chart = Chart(326, 230, (min(steps), max(steps)), (min(finite), max(finite)),
                      margin=(48, 12, 22, 34), title=tag.replace("_", " "))
        chart.axes(x_label="step", grid=True)
        chart.line(steps, values, BLUE)
        panels.append(chart)
    return row(panels)


def slice_bars(values: list[tuple[str, float]], whole: float | None, metric: str) -> str:
    """A metric by slice, the whole eval split's value dashed."""
    numbers = [v for _, v in values if math.isfinite(v)] + (
        [whole] if whole is not None and math.isfinite(whole) else [])
    low = min([0.0, *numbers])
    high = max(numbers, default=1.0)
    left = 8 + max(text_width(_label(name, 30), 8) for name, _ in values)
    chart = Chart(576, 34 * len(values) + 40, (low, high if high > low else low + 1),
                  (0, len(values)), margin=(left, 14, 6, 36))
    for i, (_, value) in enumerate(values):
        if math.isfinite(value):
            chart.rect(0, len(values) - i - 0.85, value, len(values) - i - 0.15, GREEN)
    if whole is not None and math.isfinite(whole):
        chart.line([whole, whole], [0, len(values)], "#333", 1, dash=True)
    chart.axes(y_ticks=[(len(values) - i - 0.5, _label(name, 30))
                        for i, (name, _) in enumerate(values)],
               x_label=f"{metric} (dashed: the whole eval split)")
    return chart.svg()


def calibration(buckets: list, positive: str) -> str:
    """Predicted probability against the share that is positive, per bucket (dot: examples)."""
    chart = Chart(400, 346, (0, 1), (0, 1), margin=(52, 14, 10, 40))
    chart.axes(x_label=f"mean predicted P({positive})", y_label=f"share that is {positive}",
               grid=True)
    chart.line([0, 1], [0, 1], GREY, 1, dash=True)
    most = max((b[2] for b in buckets), default=1) or 1
    for b in buckets:
        chart.dot(b[4], b[3], 2 + 8 * math.sqrt(b[2] / most), BLUE)
    return chart.svg()


def confusion(counts: list[list[float]], names: list[str]) -> str:
    """The confusion matrix as a heat map, actual by predicted, each cell's count written in."""
    n = len(names)
    labels = [_label(name) for name in names]
    widest = max(text_width(label, FONT - 2) for label in labels)
    left, bottom, cell = 26 + widest, 30 + 0.72 * widest, 42  # the x labels turned 45 degrees
    chart = Chart(left + n * cell + 10, 10 + n * cell + bottom, (0, n), (0, n),
                  margin=(left, 10, 10, bottom))
    most = max((max(r) for r in counts), default=0) or 1
    for a, counted in enumerate(counts):
        for p, value in enumerate(counted):
            share = value / most
            chart.rect(p, n - a - 1, p + 1, n - a, blue(share))
            x, y = chart.sx(p + 0.5), chart.sy(n - a - 0.5) + 4
            chart.text(x, y, number(value), FONT - 1, "middle",
                       color="#fff" if share > 0.5 else "#333")
    chart.axes(x_ticks=[(p + 0.5, label) for p, label in enumerate(labels)],
               y_ticks=[(n - a - 0.5, label) for a, label in enumerate(labels)],
               x_rotate=True)
    chart.text(chart.left + chart.inner_width / 2, chart.height - 4, "predicted", anchor="middle")
    chart.text(11, chart.top + chart.inner_height / 2, "actual", anchor="middle", rotate=-90)
    return chart.svg()


def trend(points: list[dict], metric: str) -> str:
    """The gating metric of each run's model, oldest to newest, and of the serving model on the
    same rows where it was scored."""
    served = [(i, v["serving"]) for i, v in enumerate(points) if v["serving"] is not None]
    values = [v["model"] for v in points] + [s for _, s in served]
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    chart = Chart(576, 250, (0, max(len(points) - 1, 1)), (min(finite), max(finite)),
                  margin=(52, 14, 26, 36))
    chart.axes(x_ticks=[(i, str(i)) for i in range(len(points))], x_label="run (oldest to newest)",
               y_label=metric, grid=True)
    chart.line(range(len(points)), [v["model"] for v in points], BLUE)
    for i, v in enumerate(points):
        chart.dot(i, v["model"], 3.5, BLUE)
    legend = [("the run's model", BLUE, False)]
    if served:
        chart.line([i for i, _ in served], [s for _, s in served], RED)
        for i, s in served:
            chart.dot(i, s, 3.5, RED, square=True)
        legend.append(("the serving model, on the same rows", RED, True))
    x = chart.left + 8
    for label, color, square in legend:  # above the plot area, never over a line
        shape = (f'<rect x="{x:.1f}" y="8" width="8" height="8" fill="{color}"/>' if square else
                 f'<circle cx="{x + 4:.1f}" cy="12" r="4" fill="{color}"/>')
        chart.parts.append(shape)
        chart.text(x + 12, 16, label, 9)
        x += 24 + text_width(label, 9)
    return chart.svg()
