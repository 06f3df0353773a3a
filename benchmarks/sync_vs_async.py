"""Synchronous against asynchronous data parallelism on the same model, data and examples.

  sync   N worker processes under MultiWorkerMirroredStrategy: one update per global step of
         N x batch, every worker waits for the all-reduce;
  async  N worker processes and one parameter server under ParameterServerStrategy, a chief
         coordinating: every worker applies its own updates of `batch`, without waiting.

Both train the same number of examples (trainer.train_examples) with lockstep's Trainer and the
scaling rules (the learning rate scales with the batch of one update), as clusters of processes on
loopback named by TF_CONFIG, as on Kubernetes. Then both again with a straggler: worker 1 is
stopped (SIGSTOP) for --stall of every 100 ms, as a machine that gets a quarter of a CPU would be;
sync waits for it at every step, async goes on with the others.

Prints, per run: updates, examples/s over the training loop, final train loss, eval accuracy (the
exported model's, on the eval split), staleness; then the ratios async/sync.

usage: python benchmarks/sync_vs_async.py [--pipeline-root ROOT --label L] [--workers N]
         [--batch B] [--examples E] [--stall S] [--smoke]
Without --pipeline-root it first runs the pipeline on the bundled data with trainer.strategy =
parameter_server, so that its Transform keeps tf.Transform's TF2 graph (pipeline/definition.py,
transform_settings: a parameter-server worker gets the transform's tables from the chief, which
a TF1 graph's cannot give); both sides read that graph and those examples. A --pipeline-root of
yours must come from such a run (its latest Transform's; tests/test_parameter_server.py smokes
the benchmark on the root of its own parameter-server run). --smoke: the two runs with a
straggler only (each cluster, the stall and the table; the runs without one differ only in
starting no staller), 320 examples (5 synchronous updates), seconds of training each, the
straggler stopped 50 ms of every 100 (it is stopped from its start, so at 75 its TensorFlow import
alone takes four times as long).
A run that fails keeps its directory and names its logs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import REPO
from trainer_module.job import TrainJob
from trainer_module.parameter_server import TRAINER_PROCESS_ENV
from runtime.processes import free_ports
from trainer_module.settings import CLASSIFICATION, TrainerConfig
from trainer_module.custom_config import TrainSpec

ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))


class Failed(RuntimeError):
    """A step failed; the message names the logs it left."""


def bundled_root(tmp: Path, examples: int) -> Path:
    """The pipeline on the bundled data, asynchronous, so that its transform graph is TF2's (which
    both trainers read); its own Trainer trains `examples` examples."""
    root = tmp / "pipeline_root"
    config = tmp / "async.toml"
    config.write_text(f'[trainer]\nstrategy = "parameter_server"\ntrain_examples = {examples}\n')
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--pipeline-root",
                             str(root), "--serving-dir", str(tmp / "serving"), "--config",
                             str(config)], cwd=tmp, env=ENV, capture_output=True, text=True)
    (tmp / "pipeline.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        raise Failed(f"the pipeline run failed; see {tmp / 'pipeline.log'}:\n"
                     f"{result.stderr[-3000:]}")
    return root


def _latest(pattern: Path) -> str:
    """The output of the latest execution (directories named by execution id: 9 before 10)."""
    return max(glob.glob(str(pattern)), key=lambda path: (len(Path(path).name), Path(path).name))


def job(root: Path, label: str, out: Path, **trainer) -> Path:
    transform_dir = _latest(root / "Transform" / "transform_graph" / "*")
    examples = _latest(root / "CsvExampleGen" / "examples" / "*")
    out.mkdir(parents=True)
    path = out / "job.json"
    path.write_text(TrainJob(
        train_files=[f"{examples}/Split-train/*"], eval_files=[f"{examples}/Split-eval/*"],
        transform_dir=transform_dir, model_run_dir=str(out / "run"),
        serving_model_dir=str(out / "serving"),
        spec=TrainSpec(label, CLASSIFICATION, TrainerConfig(**trainer))).to_json())
    return path


def _start(command, out: Path, name: str, tf_config: dict, **env) -> subprocess.Popen:
    log = open(out / f"{name}.log", "w")  # noqa: SIM115
    return subprocess.Popen(command, env=dict(ENV, TF_CONFIG=json.dumps(tf_config), **env),
                            stdout=log, stderr=subprocess.STDOUT)


def _stall(process: subprocess.Popen, stall: float, done: threading.Event) -> None:
    """Stops the process for `stall` of every 0.1 s until done: a straggler."""
    while not done.is_set() and process.poll() is None:
        os.kill(process.pid, signal.SIGSTOP)
        time.sleep(stall)
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.1 - stall)


def run(kind: str, args, root: Path, tmp: Path, stall: float) -> dict:
    name = f"{kind}{'-straggler' if stall else ''}"
    out = tmp / name
    workers = [f"localhost:{p}" for p in free_ports(args.workers)]
    train = [sys.executable, "-m", "trainer_module.train"]
    settings = dict(per_replica_batch=args.batch, train_examples=args.examples, seed=1,
                    steps_per_execution=5, checkpoint_every=10**9, log_every=10**9)
    if kind == "sync":
        path = job(root, args.label, out, strategy="multi_worker", **settings)
        cluster = {"worker": workers}
        procs = [_start(train + [str(path), str(out / f"result-{i}.json")], out, f"worker-{i}",
                        {"cluster": cluster, "task": {"type": "worker", "index": i}})
                 for i in range(args.workers)]
        chief, straggler = procs[0], procs[1]
    else:
        path = job(root, args.label, out, strategy="parameter_server", **settings)
        chief_port, ps_port = free_ports(2)
        cluster = {"chief": [f"localhost:{chief_port}"], "worker": workers,
                   "ps": [f"localhost:{ps_port}"]}
        serve = [sys.executable, "-m", "trainer_module.parameter_server"]
        procs = [_start(serve, out, f"{task}-{i}", {"cluster": cluster, "task": {"type": task,
                                                                             "index": i}})
                 for task, i in [("ps", 0)] + [("worker", i) for i in range(args.workers)]]
        straggler = procs[2]
        chief = _start(train + [str(path), str(out / "result-0.json")], out, "chief",
                       {"cluster": cluster, "task": {"type": "chief", "index": 0}},
                       **{TRAINER_PROCESS_ENV: "1"})
    done = threading.Event()
    if stall:
        threading.Thread(target=_stall, args=(straggler, stall, done), daemon=True).start()
    try:
        chief.wait(timeout=3600)
    finally:
        done.set()
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                if kind == "async":
                    proc.kill()
                proc.wait()
    if chief.returncode:
        log = out / ("chief.log" if kind == "async" else "worker-0.log")
        raise Failed(f"{name} failed; see {log} (and the other logs in {out}):\n"
                     + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
    summary = json.loads((out / "result-0.json").read_text())
    plan, asynchronous = summary["plan"], summary.get("asynchronous") or {}
    return {"run": name, "updates": plan["train_steps"], "batch": plan["global_batch"],
            "examples_per_sec": plan["examples"] / summary["train_seconds"],
            "loss": summary["train"]["loss"],
            "accuracy": summary["eval"].get("accuracy", summary["eval"].get("rmse")),
            "staleness": (f"{asynchronous['staleness_mean']:.2f} / {asynchronous['staleness_max']}"
                          if asynchronous else "-")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline-root", type=Path, help="a finished lockstep run's root")
    parser.add_argument("--label", default="species")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per replica, per worker")
    parser.add_argument("--examples", type=int, default=32_000)
    parser.add_argument("--stall", type=float, default=0.075,
                        help="seconds of every 0.1 s the straggler is stopped")
    parser.add_argument("--smoke", action="store_true",
                        help="the straggler's two runs, 320 examples, a 50 ms stall: does it run "
                             "and print its table")
    args = parser.parse_args()
    if args.smoke:
        args.examples, args.stall = min(args.examples, 320), min(args.stall, 0.05)
    tmp = Path(tempfile.mkdtemp(prefix="lockstep-sync-async-"))
    try:
        root = args.pipeline_root or bundled_root(tmp, args.examples)
        stalls = (args.stall,) if args.smoke else (0.0, args.stall)
        rows = [run(kind, args, root, tmp, stall) for stall in stalls for kind in ("sync", "async")]
    except Failed as failed:  # its logs stay where it says
        sys.exit(str(failed))
    except BaseException:  # anything else: the logs stay too
        print(f"kept {tmp}, with the logs of each run", file=sys.stderr, flush=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.workers} workers, {args.examples} examples, batch {args.batch} per worker; "
          f"straggler: worker 1 stopped {args.stall * 1000:.0f} ms of every 100 ms")
    print(f"{'run':<17} {'updates':>8} {'batch':>6} {'examples/s':>11} {'loss':>8} "
          f"{'eval':>7} {'staleness mean/max':>19}")
    for r in rows:
        print(f"{r['run']:<17} {r['updates']:>8} {r['batch']:>6} {r['examples_per_sec']:>11.0f} "
              f"{r['loss']:>8.4f} {r['accuracy']:>7.4f} {r['staleness']:>19}")
    speed = {r["run"]: r["examples_per_sec"] for r in rows}
    slow = f"{speed['async-straggler'] / speed['sync-straggler']:.2f} with one"
    if args.smoke:
        print(f"async / sync examples/s: {slow} (--smoke: no runs without one)")
        return
    print(f"async / sync examples/s: {speed['async'] / speed['sync']:.2f} without a straggler, "
          f"{slow}; the straggler keeps {speed['sync-straggler'] / speed['sync']:.2f} of "
          f"sync's speed and {speed['async-straggler'] / speed['async']:.2f} of async's")


if __name__ == "__main__":
    main()
