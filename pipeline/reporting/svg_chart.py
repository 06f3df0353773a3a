"""A chart drawn as inline SVG by hand: axes with round ticks, bars, lines, dots, cells and text,
nothing else. The run report's figures (plots.py) are made of these; the page loads nothing and
opens offline. The penguins page's 10 figures take about 50 ms in all here; matplotlib took 50 to
75 ms a figure and 0.35 s to import, about a second at the end of every run."""

from __future__ import annotations

import math
from html import escape

FONT = 10  # px; tick labels FONT - 2
CHAR = 0.6  # a character's width in a sans-serif font, in font sizes (for the layout only)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) from low to high: at least two, as
    near `count` as such a step gives."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    power = 10 ** math.floor(math.log10((high - low) / max(count - 1, 1)))

    def ticks(step):
        first = math.ceil(low / step - 1e-9)
        return [round((first + i) * step, 12)
                for i in range(int(math.floor(high / step + 1e-9)) - first + 1)]

    options = [ticks(m * power) for m in (0.5, 1, 2, 5, 10)]
    def miss(t):  # off the count asked; a tie goes to fewer ticks, but not to just two
        return abs(len(t) - count) + (0.5 if len(t) == 2 < count else 0), len(t)

    return min((t for t in options if len(t) >= 2), key=miss, default=[low, high])


def number(value: float) -> str:
    """A tick's or a count's label: 250k, 1.5M, 2013, 2007.5, 0.25, 3."""
    for at, size, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e5, 1e3, "k")):
        if abs(value) >= at:
            return f"{value / size:.3g}{suffix}"
    return str(int(value)) if value == int(value) else f"{value:.6g}"


def text_width(text: str, size: float = FONT) -> float:
    return len(text) * size * CHAR


class Chart:
    """One plot area: data x in [x0, x1] and y in [y0, y1], drawn inside `margin` (left, right,
    top, bottom px) of a width x height px picture; `svg()` the picture, or a panel of a row
    (`row`)."""

    def __init__(self, width: float, height: float, x: tuple[float, float],
                 y: tuple[float, float], margin=(40, 10, 10, 28), title: str = ""):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = margin
        self.x0, self.x1 = x if x[1] > x[0] else (x[0] - 0.5, x[0] + 0.5)
        self.y0, self.y1 = y if y[1] > y[0] else (y[0] - 0.5, y[0] + 0.5)
        self.parts: list[str] = []
        if title:
            self.text(self.left + self.inner_width / 2, 12, title, anchor="middle")

    @property
    def inner_width(self) -> float:
        return self.width - self.left - self.right

    @property
    def inner_height(self) -> float:
        return self.height - self.top - self.bottom

    def sx(self, x: float) -> float:
        return self.left + (x - self.x0) / (self.x1 - self.x0) * self.inner_width

    def sy(self, y: float) -> float:
        return self.top + (self.y1 - y) / (self.y1 - self.y0) * self.inner_height

    def text(self, x: float, y: float, text: str, size: float = FONT, anchor: str = "start",
             rotate: float = 0, color: str = "#333") -> None:
        turn = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" fill="{color}" '
                          f'text-anchor="{anchor}"{turn}>{escape(text)}</text>')

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: str) -> None:
        """A rectangle between two data corners."""
        left, right = sorted((self.sx(x0), self.sx(x1)))
        top, bottom = sorted((self.sy(y0), self.sy(y1)))
        self.parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
                          f'height="{bottom - top:.1f}" fill="{color}"/>')

    def line(self, xs, ys, color: str, width: float = 1.4, dash: bool = False) -> None:
        points = " ".join(f"{self.sx(x):.1f},{self.sy(y):.1f}" for x, y in zip(xs, ys)
                          if math.isfinite(x) and math.isfinite(y))
        dashes = ' stroke-dasharray="4 3"' if dash else ""
        self.parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" '
                          f'stroke-width="{width:g}"{dashes}/>')

    def dot(self, x: float, y: float, radius: float, color: str, square: bool = False) -> None:
        cx, cy = self.sx(x), self.sy(y)
        if square:
            self.parts.append(f'<rect x="{cx - radius:.1f}" y="{cy - radius:.1f}" '
                              f'width="{2 * radius:.1f}" height="{2 * radius:.1f}" '
                              f'fill="{color}"/>')
        else:
            self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}" '
                              f'fill="{color}" fill-opacity="0.8"/>')

    def axes(self, x_ticks=None, y_ticks=None, x_label: str = "", y_label: str = "",
             grid: bool = False, x_rotate: bool = False) -> None:
        """The left and bottom axis lines; ticks as [(value, label)] (default: round numbers),
        [] for none; grid: light lines at the ticks."""
        left, bottom = self.left, self.height - self.bottom
        right, top = self.width - self.right, self.top
        x_ticks = self._ticks(self.x0, self.x1, x_ticks)
        y_ticks = self._ticks(self.y0, self.y1, y_ticks)
        for value, label in x_ticks:
            x = self.sx(value)
            if grid:
                self.parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" '
                                  'stroke="#ddd"/>')
            self.parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" '
                              f'y2="{bottom + 3}" stroke="#333"/>')
            if x_rotate:
                self.text(x, bottom + 12, label, FONT - 2, "end", -45)
            else:
                self.text(x, bottom + 12, label, FONT - 2, "middle")
        for value, label in y_ticks:
            y = self.sy(value)
            if grid:
                self.parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" '
                                  'stroke="#ddd"/>')
            self.parts.append(f'<line x1="{left - 3}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" '
                              'stroke="#333"/>')
            self.text(left - 5, y + 3, label, FONT - 2, "end")
        self.parts.append(f'<polyline points="{left},{top} {left},{bottom} {right},{bottom}" '
                          'fill="none" stroke="#333"/>')
        if x_label:
            self.text(left + self.inner_width / 2, self.height - 4, x_label, anchor="middle")
        if y_label:
            self.text(11, top + self.inner_height / 2, y_label, anchor="middle", rotate=-90)

    @staticmethod
    def _ticks(low: float, high: float, given) -> list[tuple[float, str]]:
        if given is not None:
            return [(v, label) for v, label in given if low - 1e-9 <= v <= high + 1e-9]
        return [(v, number(v)) for v in nice_ticks(low, high)]

    def svg(self) -> str:
        return svg(self.width, self.height, self.parts)


def svg(width: float, height: float, parts) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">'
            + "".join(parts) + "</svg>")


def row(charts: list[Chart]) -> str:
    """Charts side by side in one picture."""
    parts, offset = [], 0.0
    for chart in charts:
        parts.append(f'<g transform="translate({offset:.0f} 0)">{"".join(chart.parts)}</g>')
        offset += chart.width
    return svg(offset, max(c.height for c in charts), parts)


def blue(share: float) -> str:
    """White (0) to dark blue (1), for a heat map's cells."""
    share = min(max(share, 0.0), 1.0)
    low, high = (247, 251, 255), (8, 48, 107)
    return "#" + "".join(f"{round(a + (b - a) * share):02x}" for a, b in zip(low, high))
