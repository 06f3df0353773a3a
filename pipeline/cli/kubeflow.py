"""`lockstep submit`, `schedule` and `schedules`: runs and recurring runs on Kubeflow Pipelines
(or Vertex AI), and the local crontab schedule."""

from __future__ import annotations

import argparse
import os

from pipeline.cli.common import add_config_arg, load_config
from pipeline.cli.usage import UsageError


def _add_kfp_args(p: argparse.ArgumentParser, package: bool = True) -> None:
    add_config_arg(p)
    p.add_argument("--host", help="the KFP API endpoint, e.g. https://kfp.example.com or "
                                  "http://localhost:8080 (default: $KF_PIPELINES_ENDPOINT, then "
                                  "kubeflow.host, which gets no token)")
    p.add_argument("--token-file", metavar="FILE",
                   help="a file holding the bearer token, or - to read it from stdin (default: "
                        "$KF_PIPELINES_TOKEN, $KFP_TOKEN, or the file $KF_PIPELINES_SA_TOKEN_PATH)")
    p.add_argument("--token", help=argparse.SUPPRESS)  # refused: argv is public
    p.add_argument("--namespace", help="the KFP namespace (default: kubeflow.namespace)")
    p.add_argument("--experiment", help="the experiment (default: kubeflow.experiment)")
    p.add_argument("--service-account", help="the Kubernetes service account runs use")
    if package:
        p.add_argument("--package", help="a spec from `lockstep compile` (default: compile now)")
        p.add_argument("--image", help="the image when compiling now")
        p.add_argument("--pipeline-root", help="the run's pipeline root (default: from config)")
        p.add_argument("--param", action="append", metavar="NAME=VALUE",
                       help="a pipeline parameter, e.g. train_steps=500 (repeatable)")


def add_parsers(sub) -> None:
    submit = sub.add_parser("submit", help="create a run on Kubeflow Pipelines (or Vertex AI)")
    _add_kfp_args(submit)
    submit.add_argument("--run-name", help="the run's name (default: <pipeline>-<UTC time>)")
    submit.add_argument("--vertex", action="store_true", help="submit to Vertex AI Pipelines")
    submit.add_argument("--project", help="with --vertex: the Google Cloud project")
    submit.add_argument("--region", help="with --vertex: the region, e.g. us-central1")
    submit.set_defaults(func=submit_command)

    sched = sub.add_parser(
        "schedule", help="create a recurring run on KFP, or a local crontab entry",
        description="On KFP: a recurring run. The cron has 6 fields, seconds first, and is read "
                    "in UTC: '0 0 3 * * *' is 03:00 UTC daily. Defaults: max concurrency 1, no "
                    "catch-up of missed runs. With --local: a crontab entry (5 fields, machine "
                    "local time) that runs `lockstep run` under a lock, so runs never overlap.")
    _add_kfp_args(sched)
    sched.add_argument("--cron", help="KFP: 6 fields in UTC, e.g. '0 0 3 * * *'; --local: 5 fields")
    sched.add_argument("--name", help="the schedule's name (default: <pipeline>-retrain)")
    sched.add_argument("--max-concurrency", type=int, default=1,
                       help="runs of this schedule at once (default 1)")
    sched.add_argument("--catch-up", action="store_true",
                       help="run the missed intervals after a pause (default: no catch-up)")
    sched.add_argument("--apply", action="store_true",
                       help="make the recurring run of this name match: create it, leave it, or "
                            "replace it (pause the old, create the new, delete the old)")
    sched.add_argument("--local", action="store_true", help="install a local crontab entry")
    sched.add_argument("--remove", action="store_true", help="with --local: remove the entry")
    sched.add_argument("--print", action="store_true", dest="print_only",
                       help="with --local: print the crontab entry, install nothing")
    sched.set_defaults(func=schedule_command)

    scheds = sub.add_parser("schedules", help="list, pause, resume or delete recurring runs on KFP")
    scheds.add_argument("action", choices=["list", "pause", "resume", "delete"])
    scheds.add_argument("id", nargs="?", help="the recurring run id (not for list)")
    _add_kfp_args(scheds, package=False)
    scheds.set_defaults(func=schedules_command)


def _access(args):
    from pipeline.use_cases import on_kubeflow

    if args.token is not None:
        raise UsageError("--token would put the token in the command line, which every user "
                         "sees in `ps` and shell history: use --token-file FILE (or - for "
                         "stdin) or $KF_PIPELINES_TOKEN")
    return on_kubeflow.KfpAccess(args.host, args.token_file, args.namespace, args.experiment,
                                 args.service_account)


def _spec_args(args) -> dict:
    if args.package and not os.path.isfile(args.package):
        raise UsageError(f"--package {args.package}: no such file")
    return {"package": args.package, "image": args.image, "params": args.param,
            "pipeline_root": args.pipeline_root}


def submit_command(args) -> int:
    from pipeline.use_cases import on_kubeflow

    if args.vertex and not (args.project and args.region):
        raise UsageError("--vertex needs --project and --region")
    config = load_config(args, {"paths.pipeline_root": args.pipeline_root})
    done = on_kubeflow.submit(config, _access(args), run_name=args.run_name,
                              vertex=(args.project, args.region) if args.vertex else None,
                              **_spec_args(args))
    if args.vertex:
        print(f"lockstep: submitted {done.run_id} to Vertex AI Pipelines")
        return 0
    print(f"lockstep: run {done.run_id} ({done.run_name}) in experiment '{done.where}'")
    print(done.url)
    return 0


def schedule_command(args) -> int:
    from pipeline.use_cases import on_kubeflow

    if args.local:
        return _schedule_local(args)
    if args.print_only:
        raise UsageError("--print goes with --local (the crontab entry); a KFP schedule has "
                         "nothing to print before it is made")
    if not args.cron:
        raise UsageError("--cron is required")
    config = load_config(args, {"paths.pipeline_root": args.pipeline_root})
    done = on_kubeflow.schedule(config, _access(args), args.cron, name=args.name,
                                max_concurrency=args.max_concurrency, catch_up=args.catch_up,
                                apply=args.apply, **_spec_args(args))
    if args.apply:
        print(f"lockstep: recurring run '{done.name}' {done.action}: {done.job_id}"
              + (f" (replaced {', '.join(done.replaced)})" if done.replaced else ""))
        return 0
    print(f"lockstep: recurring run {done.job_id} ({done.name}): cron '{args.cron}' UTC, max "
          f"concurrency {args.max_concurrency}, {'catch-up' if args.catch_up else 'no catch-up'}")
    return 0


def _schedule_local(args) -> int:
    from pipeline.use_cases import local_schedule

    config = load_config(args)
    name = args.name or config.pipeline_name
    if args.remove:
        found = local_schedule.unschedule_locally(config, name)
        print(f"lockstep: {'removed' if found else 'no'} local schedule '{name}'")
        return 0
    if not args.cron:
        raise UsageError("--cron is required")
    if args.print_only:
        line = local_schedule.schedule_locally(config, args.config, args.cron, name,
                                               install=False)
        print(f"lockstep: local schedule '{name}' (machine local time), not installed; "
              f"`crontab -e` takes this line as it is:\n{line}")
        return 0
    line = local_schedule.schedule_locally(config, args.config, args.cron, name)
    print(f"lockstep: installed local schedule '{name}' (machine local time):\n  {line}")
    return 0


def schedules_command(args) -> int:
    from pipeline.use_cases import on_kubeflow

    if args.action != "list" and not args.id:
        raise UsageError(f"schedules {args.action} needs the recurring run id")
    config = load_config(args, absolute=False)
    rows = on_kubeflow.schedules(config, _access(args), args.action, args.id)
    if args.action != "list":
        print(f"lockstep: {args.action} {args.id}: done")
        return 0
    for row in rows:
        print(f"{row.id}  {row.status:<8} {row.cron:<18} max {row.max_concurrency:<3} {row.name}")
    if not rows:
        print("lockstep: no recurring runs")
    return 0
