"""The run report page, looked at as a person would: the page a real run wrote, rendered by
headless Chromium (Debian's package) to a PNG, loaded without errors, offline, and showing the
same numbers as the run's summary."""

import json
import re
import shutil
import subprocess

import pytest

from conftest import cli, lockstep

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(*args, timeout=120):
    if not CHROMIUM:
        pytest.skip("Chromium is not installed (apt-get install chromium; `make test` installs it as root)")
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-extensions", "--enable-logging=stderr",
                           "--v=0", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def _page_of(stdout: str) -> str:
    [line] = [x for x in stdout.splitlines() if x.startswith("Report: ")]
    return line[len("Report: "):]


def _summary_metrics(stdout: str) -> dict[str, str]:
    line = re.search(r"^Eval metrics: (.*)$", stdout, re.M).group(1)
    return dict(re.findall(r"([a-z_]+(?: \(baseline diff\))?) (-?[\d.]+)", line))


def _rendered(page, tmp_path):
    """The DOM after load, and a screenshot; both from the real browser."""
    url = f"file://{page}"
    dom = _chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    picture = _chromium(f"--screenshot={shot}", "--window-size=1200,3000",
                        "--hide-scrollbars", url)
    assert picture.returncode == 0, picture.stderr[-2000:]
    for result in (dom, picture):
        for problem in ("Page load failed", "Uncaught", "ERR_FILE_NOT_FOUND",
                        "Failed to load resource", ":CONSOLE"):
            assert problem not in result.stderr, result.stderr[-2000:]
    return dom.stdout, shot


def test_the_report_of_a_run_shows_what_the_summary_says(penguins_run, tmp_path):
    import matplotlib.image

    out = penguins_run.first.stdout
    page = _page_of(out)
    assert page.startswith(str(penguins_run.pipeline_root / "reports")) and page.endswith(".html")
    source = open(page, encoding="utf-8").read()
    # Self-contained: nothing to fetch (no scripts, stylesheets, images or fonts from anywhere).
    assert not re.search(r"<(script|link|img|iframe)\b", source, re.I)
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|file:|//)""", source, re.I)
    assert not re.search(r"url\((?!#)", source)

    dom, shot = _rendered(page, tmp_path)
    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05  # a page was painted, not a blank

    # The numbers the summary printed, in the page the browser rendered.
    shown = dict(re.findall(r"data-metric=\"([^\"]+)\"[^>]*>([-\d.]+)<", dom))
    assert shown and shown == _summary_metrics(out), (shown, _summary_metrics(out))
    slices = re.search(r"^Eval by slice: (.*)$", out, re.M).group(1)
    for name, count in re.findall(r"(island=\w+) n=(\d+)", slices):
        cell = re.search(r"data-slice=\"%s\" data-slice-metric=\"example_count\">([\d.]+)<"
                         % re.escape(name), dom)
        assert cell and float(cell.group(1)) == float(count), name
    rows = sum(int(n) for n in re.findall(r"data-rows=\"\w+\">(\d+)<", dom))
    assert f"lockstep: {rows} rows from" in out  # train + eval = what the run read
    assert ('data-blessed="yes"' in dom) == ("Blessed: yes" in out)
    pushed = re.search(r"^Model pushed to: (.*)$", out, re.M).group(1)
    assert f'data-pushed="">{pushed}<' in dom
    steps = re.search(r"(\d+) steps of global batch (\d+)", out)
    assert f'data-plan="steps">{steps.group(1)}<' in dom
    assert f'data-plan="global batch">{steps.group(2)}<' in dom
    # Every section is there, with its plots (inline SVG).
    for section in ("components", "data", "schema", "anomalies", "training", "evaluation"):
        assert f'id="{section}"' in dom, section
    assert dom.count("<svg") >= 8 + 1 + 1 + 1  # histograms, the curve, the slices, confusion
    # The gate against the naive baseline, and recall per class from the confusion matrix.
    gate = re.search(r"^  accuracy ([\d.]+) vs ([\d.]+) for always 'Adelie'", out, re.M)
    assert f'data-gate-metric="accuracy">{gate.group(1)}<' in dom
    assert "Against the naive baseline" in dom and "Confusion matrix" in dom
    recall = re.search(r"^  recall by class: (.*)$", out, re.M).group(1)
    for name, value in re.findall(r"(\w+) ([\d.]+)", recall):
        assert f'data-recall="{name}">{value}<' in dom, name
    assert "data-final-loss" in dom and "Thresholds (TFMA's eval config)" in dom


def test_lockstep_runs_lists_each_slice_as_the_summary_does(penguins_run):
    out = penguins_run.first.stdout
    slices = re.search(r"^Eval by slice: (.*)$", out, re.M).group(1)
    listed = cli("runs", "--pipeline-root", penguins_run.pipeline_root, "-n", "100")
    assert listed.returncode == 0, listed.stderr
    first = json.loads(cli("runs", "--pipeline-root", penguins_run.pipeline_root, "-n",
                           "100", "--json").stdout)[-1]["run_id"]  # the oldest: the fixture's
    lines = listed.stdout.splitlines()
    [at] = [i for i, line in enumerate(lines) if line.endswith(f"({first})")]
    assert lines[at + 1] == f"  by slice: {slices}", lines[at:at + 2]
    assert "island=Biscoe n=" in lines[at + 1]


def test_lockstep_report_rewrites_a_past_run(penguins_run, tmp_path):
    runs = json.loads(cli("runs", "--pipeline-root", penguins_run.pipeline_root,
                          "--json").stdout)
    first = runs[-1]["run_id"]  # the oldest: the fixture's run
    result = cli("report", first, "--pipeline-root", penguins_run.pipeline_root,
                 "--output", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    [written] = list(tmp_path.glob("*.html"))
    assert result.stdout.strip() == f"lockstep: wrote {written}"
    again, original = written.read_text(), open(_page_of(penguins_run.first.stdout)).read()
    metric = re.compile(r"data-metric='[^']+'>[-\d.]+<")  # as written (the DOM quotes with ")
    assert metric.findall(again) == metric.findall(original) != []
    assert f">{first}</span></h1>" in again
    # The errors in a fresh process, as a user meets them: one line each, nothing else.
    missing = lockstep("report", "no-such-run", "--pipeline-root", penguins_run.pipeline_root,
                       fresh=True)
    assert missing.returncode == 2
    assert missing.stderr.strip().startswith("lockstep: error: no run 'no-such-run' in ")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    unwritable = lockstep("report", first, "--pipeline-root", penguins_run.pipeline_root,
                          "--output", blocked / "reports", fresh=True)
    assert unwritable.returncode == 2
    [line] = unwritable.stderr.strip().splitlines()
    assert line.startswith("lockstep: error: the report could not be written: "), line
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([written.name, "a-file"])


FIRST_SCREEN_PROBE = """<script>
const out = {height: window.innerHeight, width: window.innerWidth};
for (const key of %s) {
  const el = document.querySelector("[" + key + "]");
  out[key] = el ? el.getBoundingClientRect().bottom : null;
}
document.body.setAttribute("data-measured", JSON.stringify(out));
</script>"""


def test_the_report_opens_with_the_answer_on_the_first_screen(penguins_run, tmp_path):
    """In a 1280x800 window, before any scrolling: the verdict, the gating metric against its
    baseline, the gradient-boosting reference, the generalisation line and where the model went;
    the per-feature statistics come later, folded. Measured by Chromium's own layout (a copy of
    the page with a probe script; the page itself has none)."""
    import html

    out = penguins_run.first.stdout
    source = open(_page_of(out), encoding="utf-8").read()
    keys = ["data-blessed", "data-answer-gate", "data-answer-reference",
            "data-answer-generalization", "data-push", "data-features"]
    probed = tmp_path / "probed.html"
    probed.write_text(source.replace("</body>", FIRST_SCREEN_PROBE % json.dumps(keys) + "</body>"),
                      encoding="utf-8")
    dom = _chromium("--window-size=1280,800", "--hide-scrollbars", "--dump-dom",
                    f"file://{probed}")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-measured="([^"]*)"', dom.stdout)
    assert found, dom.stdout[-2000:]
    at = json.loads(html.unescape(found.group(1)))
    assert 600 < at["height"] <= 800 and at["width"] == 1280, at
    for key in keys[:-1]:
        assert at[key] is not None and 0 < at[key] <= at["height"], (key, at)
    assert at["data-features"] > at["height"], at  # the data's details: after the answer
    # What the first screen says is what the summary said.
    gate = re.search(r"^  accuracy ([\d.]+) vs ([\d.]+) for always 'Adelie' \(needs at least "
                     r"([\d.]+)\)", out, re.M)
    answer = re.search(r"<p data-answer-gate>(.*?)</p>", source).group(1)
    assert re.sub("<[^>]+>", "", answer) == (
        f"accuracy {gate.group(1)} on the eval split (the gating metric) against "
        f"{gate.group(2)} for always &#x27;Adelie&#x27; (the naive baseline, measured on the "
        f"whole table); needed at least {float(gate.group(3)):.4g}")
    for line in ("Reference: LightGBM", "Generalisation: "):
        said = re.search(rf"^{line}.*$", out, re.M).group(0)
        assert html.escape(said) in source.split("</section>")[0], line
    assert re.search(r"<details data-features><summary>Per feature, on the train split: \d+ ",
                     source)
