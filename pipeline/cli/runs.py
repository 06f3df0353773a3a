"""`lockstep runs`: the pipeline's past runs, newest first: local runs from ML Metadata, kfp-local
runs from their task directories; per slice on a line of its own where the run sliced."""

from __future__ import annotations

import json
import time

from pipeline.cli.common import add_config_arg, load_config


def add_parser(sub) -> None:
    runs = sub.add_parser("runs", help="list past runs (newest first) from ML Metadata")
    add_config_arg(runs)
    runs.add_argument("--pipeline-root", help="the pipeline root whose runs to list")
    runs.add_argument("-n", "--limit", type=int, default=20, help="at most this many (default 20)")
    runs.add_argument("--json", action="store_true", help="print the runs as JSON")
    runs.set_defaults(func=command)


def _row(report) -> dict:
    nodes = {n.node: n.state for n in report.nodes}
    return {
        "run_id": report.run_id,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.started)),
        "data": report.data,
        "spans": report.spans,
        "split": {"rule": report.split_rule, "words": report.split_words()},
        "generalization": report.generalization,
        "executed": [n for n, s in nodes.items() if s == "executed"],
        "cached": [n for n, s in nodes.items() if s == "cached"],
        "unfinished": {n: s for n, s in nodes.items() if s not in ("executed", "cached")},
        "metrics": report.metrics,
        "slice_metrics": report.slice_metrics,
        "gate": report.gate.to_dict() if report.gate else None,
        "recall_by_class": report.per_class_recall(),
        "versus_serving": report.versus_serving(),
        "reference": report.versus_reference(),
        "blessed": report.blessed,
        "pushed_to": report.pushed_to,
        "push_note": report.push_note,
        "examples": report.training.plan.examples if report.training else None,
        "input_fingerprint": report.training.input_fingerprint if report.training else None,
    }


def command(args) -> int:
    from pipeline.use_cases import run_history

    config = load_config(args, {"paths.pipeline_root": args.pipeline_root})
    rows = [_row(r) for r in run_history.past_runs(config, args.limit)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(run_history.no_runs(config))
        return 0
    for row in rows:
        metric = ", ".join(f"{k} {v:.4f}" for k, v in sorted(row["metrics"].items())
                           if "diff" not in k and k != "example_count") or "no metrics"
        span = f" span {','.join(map(str, row['spans']))}" if row["spans"] else ""
        work = f"{len(row['executed'])} executed, {len(row['cached'])} cached"
        if row["unfinished"]:
            work += ", " + ", ".join(f"{n} {s}" for n, s in row["unfinished"].items())
        outcome = ("pushed " + row["pushed_to"] if row["pushed_to"] else
                   f"blessed, not pushed ({row['push_note'] or 'no push'})" if row["blessed"] else
                   "not blessed" if row["blessed"] is False else "no verdict")
        versus = row["versus_serving"]
        if versus and versus["serving"] is not None:
            metric += f"  ({versus['metric']} of the serving model on these rows {versus['serving']:.4f})"
        print(f"{row['started']}  {row['data'] or '?'}{span}  {work}  {metric}  {outcome}  "
              f"({row['run_id']})")
        if row["slice_metrics"]:
            print(f"  by slice: {_slices(row['slice_metrics'])}")
    return 0


def _slices(slice_metrics: dict) -> str:
    """"island=Biscoe n=30 accuracy 0.9667; ...": the first SLICES_SHOWN slices, as the run's
    summary shows them (--json has them all)."""
    from pipeline.reporting.run_report import SLICES_SHOWN

    shown = list(slice_metrics.items())[:SLICES_SHOWN]
    more = len(slice_metrics) - len(shown)
    return "; ".join(
        f"{name} " + ", ".join(f"n={v:.0f}" if k == "example_count" else f"{k} {v:.4f}"
                               for k, v in sorted(values.items()))
        for name, values in shown) + (f"; and {more} more (--json)" if more > 0 else "")
