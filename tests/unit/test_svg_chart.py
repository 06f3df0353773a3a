"""The report's figures, drawn as SVG by hand (pipeline/reporting/svg_chart.py, plots.py): round
ticks, labels that fit, each figure a well-formed SVG that draws its data (a real browser renders
a real run's page: tests/test_report_page.py)."""

import xml.etree.ElementTree as ET

import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipeline.reporting import plots
from pipeline.reporting.svg_chart import blue, nice_ticks, number

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("low, high, count, ticks", [
    (0, 41.4, 3, [0, 20, 40]),
    (0, 39.9, 3, [0, 10, 20, 30]),
    (0, 3, 3, [0, 1, 2, 3]),
    (2007, 2009, 4, [2007, 2008, 2009]),
    (13.1, 21.5, 4, [14, 16, 18, 20]),
    (-3, 7, 4, [-2, 0, 2, 4, 6]),
    (0.9, 0.91, 4, [0.9, 0.905, 0.91]),
    (0, 0.0014, 4, [0, 0.0005, 0.001]),
    (5, 5, 4, [5]),  # no range: the value alone
])
def test_ticks_are_round_and_about_as_many_as_asked(low, high, count, ticks):
    assert nice_ticks(low, high, count) == pytest.approx(ticks)


def test_labels_are_short_and_exact():
    assert [number(v) for v in (0, 3, 2013, 2007.5, 0.25, 250_000, 1_500_000, 2e9)] == [
        "0", "3", "2013", "2007.5", "0.25", "250k", "1.5M", "2G"]
    assert blue(0) == "#f7fbff" and blue(1) == "#08306b" and blue(7) == blue(1)


def _drawn(svg: str) -> dict:
    """{tag: count} of a figure's SVG, parsed as XML (so it is well formed)."""
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg" and float(root.get("width")) > 0
    counts = {}
    for element in root.iter():
        tag = element.tag.removeprefix(SVG)
        counts[tag] = counts.get(tag, 0) + 1
    return counts


def test_each_figure_draws_its_data():
    numeric = statistics_pb2.FeatureNameStatistics()
    histogram = numeric.num_stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
    for i in range(10):
        histogram.buckets.add(low_value=i, high_value=i + 1, sample_count=3.5 * i)
    assert _drawn(plots.histogram(numeric))["rect"] == 10
    text = statistics_pb2.FeatureNameStatistics()
    for value, n in (("a <b> & c", 9), ("a very long value indeed", 4)):
        text.string_stats.top_values.add(value=value, frequency=n)
    drawn = plots.histogram(text)
    assert _drawn(drawn)["rect"] == 2 and "a &lt;b&gt; &amp; c" in drawn and "…" in drawn
    assert plots.histogram(statistics_pb2.FeatureNameStatistics()) == ""

    assert _drawn(plots.curves({"loss": [(10, 1.0), (20, 0.5)], "learning_rate": [(10, 1e-3)],
                                "accuracy": []}))["g"] == 2  # a panel each, none for no points
    assert plots.curves({}) == ""
    assert _drawn(plots.slice_bars([("island=Biscoe", 0.9), ("island=Dream", float("nan"))],
                                   0.95, "accuracy"))["rect"] == 1
    assert _drawn(plots.calibration([(0, 0.1, 5, 0.2, 0.15), (0.1, 1, 50, 0.9, 0.8)],
                                    "yes"))["circle"] == 2
    drawn = plots.confusion([[26, 0, 0], [0, 15, 0], [1, 0, 17]], ["Adelie", "Gentoo", "Chinstrap"])
    assert _drawn(drawn)["rect"] == 9 and ">26<" in drawn and ">17<" in drawn
    points = [{"model": 0.9, "serving": None}, {"model": 0.92, "serving": 0.91}]
    assert _drawn(plots.trend(points, "accuracy"))["circle"] == 2 + 1  # the legend's dot too
