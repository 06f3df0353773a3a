"""What every part of the run report's page (pipeline/reporting/page.py) writes with: text escaped
for HTML, and the page's style."""

from __future__ import annotations

import html

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#1d232a}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:8px 0} td,th{padding:3px 10px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:middle} th{background:#f6f8fa} td.n{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-size:16px;padding:8px 12px;border-radius:6px;display:inline-block}
.yes{background:#dafbe1} .no{background:#ffebe9} .muted{color:#57606a} svg{display:block}
#answer{border:1px solid #d0d7de;border-radius:6px;padding:4px 14px;margin-top:8px}
#answer p{margin:6px 0} summary{cursor:pointer;margin:8px 0}
pre{background:#f6f8fa;padding:8px;overflow-x:auto}
"""


def e(value) -> str:
    """value as HTML text."""
    return html.escape(str(value))
