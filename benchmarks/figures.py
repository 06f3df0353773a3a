"""The figures docs/ (docs/setup.md, the README's) quote, measured here and printed in one block, so a page and
the code cannot drift: a page quotes this script's output and names it.

Each `lockstep run` is the real CLI in a fresh process on the bundled penguins data, in a fresh
directory:
1. the bundled run from a fresh pipeline root: the summary's `Total` (the pipeline) and the whole
   process's wall time (start-up and imports too);
2. the same again on that root, twice: what is cached and what runs again (the baseline lookup
   finds the model the first run pushed, so the Evaluator scores against it again and the
   Pusher says it was pushed already), with how many components did each;
3. with --kfp-local: the compiled spec under kfp.local (each task a process), its `Total`;
4. the test counts: the whole suite and the fast part (`-m "not slow"`), as pytest collects them.

The machine is named with its cores and load, since a busy machine is slower: quote a figure
with the machine it came from.
usage: python benchmarks/figures.py [--kfp-local] [--no-tests] [--smoke] [--write [PAGE]]
--smoke: the first run only, no test counts (does it run and print its figures)
--write: also write the block to PAGE (default docs/figures.md), the page docs/setup.md and the
README link to instead of copying figures by hand.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO

_TOTAL = re.compile(r"^Total: ([\d.]+)s$", re.M)


def _env() -> dict:
    return dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONPATH=str(REPO))


def lockstep_run(root: Path, *flags: str) -> tuple[float, float, str]:
    """(the summary's Total, the process's wall seconds, "N executed, M cached") of one
    `lockstep run`."""
    command = [sys.executable, "-m", "pipeline.cli", "run", "--pipeline-root",
               str(root / "pipeline_root"), "--serving-dir", str(root / "serving"), *flags]
    tic = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - tic
    total = _TOTAL.search(done.stdout)
    if done.returncode or not total:  # the directory stays, with the run's logs
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}\n"
                 f"its logs: {root / 'pipeline_root' / 'logs'} (kept)")
    executed = len(re.findall(r"^  \w+\s+(?:executed|done)\s", done.stdout, re.M))
    cached = len(re.findall(r"^  \w+\s+cached\s", done.stdout, re.M))
    return float(total.group(1)), wall, f"{executed} executed, {cached} cached"


def test_count(*marks: str) -> int:
    """The tests pytest collects (with `-m` marks given; a path of tests/ instead of all)."""
    where = [] if marks and marks[-1].startswith("tests") else ["tests"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *marks, *where],
                          cwd=REPO, env=_env(), capture_output=True, text=True)
    found = re.search(r"^(\d+)(?:/\d+)? tests? (?:collected|selected)", done.stdout, re.M)
    if not found:
        sys.exit(f"pytest --collect-only said:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kfp-local", action="store_true",
                        help="also the bundled run under kfp.local (a few minutes)")
    parser.add_argument("--no-tests", action="store_true", help="skip counting the tests")
    parser.add_argument("--smoke", action="store_true", help="the first run only, no counts")
    parser.add_argument("--write", nargs="?", const=str(REPO / "docs" / "figures.md"),
                        default="", help="also write the figures to this page")
    args = parser.parse_args()
    runs = ("first run, fresh root", "second run, same root", "third run, same root")
    if args.smoke:
        runs, args.no_tests, args.kfp_local = runs[:1], True, False
    lines = []
    work = Path(tempfile.mkdtemp(prefix="lockstep-figures-"))  # removed once the runs succeeded
    for what in runs:
        total, wall, work_done = lockstep_run(work)
        lines.append(f"bundled data, {what}: Total {total:.1f} s, the process {wall:.1f} s "
                     f"({work_done})")
    shutil.rmtree(work)
    if args.kfp_local:
        work = Path(tempfile.mkdtemp(prefix="lockstep-figures-"))
        total, wall, _ = lockstep_run(work, "--orchestrator", "kfp-local")
        shutil.rmtree(work)
        lines.append(f"bundled data under kfp-local, fresh root: Total {total:.1f} s, the process "
                     f"{wall:.1f} s")
    if not args.no_tests:
        everything, fast = test_count(), test_count("-m", "not slow")
        unit = test_count("tests/unit")
        lines.append(f"tests: {everything} ({fast} fast, make test-fast; {unit} unit, "
                     "make test-unit)")
    load = os.getloadavg()[0]
    head = (f"benchmarks/figures.py on {os.cpu_count()} cores, load {load:.1f} at the end, "
            f"{time.strftime('%Y-%m-%d')}:")
    print(head)
    for line in lines:
        print(f"  {line}")
    if args.write:
        block = "\n".join([head, *(f"  {line}" for line in lines)])
        Path(args.write).write_text(PAGE.format(block=block))


PAGE = """# Figures, as measured

Written by `python benchmarks/figures.py --write` (never by hand): the bundled data's runs with
the real CLI in fresh processes, and the test counts as pytest collects them. docs/setup.md and
the README link here; run it again after a change that moves them.

```
{block}
```
"""


if __name__ == "__main__":
    main()
