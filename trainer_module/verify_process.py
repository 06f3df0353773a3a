"""`lockstep verify`'s check (trainer_module/equivalence.py) in a fresh process, or in W worker
processes on loopback: its command line, and `run_in_subprocess`, which starts it.

The logical CPU devices must exist before TensorFlow starts, so a process that already runs
TensorFlow runs the check as

    python -m trainer_module.verify_process JOB.json OUT.json --replicas N --steps K
        [--workers W] [--optimizer run]

(JOB.json: a TrainJob's JSON, trainer_module/job.py; OUT.json gets `Verification.to_dict()`;
exit status 0 when it passed, 1 when not, 2 on an error, told in one line on stderr.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import logging
import tensorflow as tf

from runtime import processes
from trainer_module import scaling, strategy as strategy_lib
from trainer_module.equivalence import OPTIMIZERS, SGD, VerifyError, check
from trainer_module.job import TrainJob
from trainer_module.summary import Verification

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer_module.verify_process",
        description="N replicas against one device on a TrainJob's model, loss and data.")
    parser.add_argument("job", help="a TrainJob as JSON")
    parser.add_argument("out", help="where to write the result as JSON (the chief writes it)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=None,
                        help="default: by trainer.precision (TOLERANCES)")
    parser.add_argument("--workers", type=int, default=1,
                        help="this process is one of W workers (TF_CONFIG names the cluster)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=SGD,
                        help="sgd (default), or the run's own optimizer and schedule")
    parser.add_argument("--hardware", choices=sorted(scaling.HARDWARE_BATCH), default="",
                        help="what a replica of the checked run is, for its default batch "
                             "(default: cpu)")
    args = parser.parse_args(argv)
    try:
        # Before TensorFlow starts: one device for the reference, N CPU replicas for lockstep.
        tf.config.set_visible_devices([], "GPU")
        tf.config.set_visible_devices([], "TPU")
        if args.workers == 1:
            strategy_lib.configure_emulated_replicas(args.replicas)
        with open(args.job) as handle:
            job = TrainJob.from_json(handle.read())
        result = check(job, args.replicas, args.steps, args.tolerance, args.workers,
                        args.hardware, args.optimizer)
        if result is None:  # a worker that is not the chief: it trained its replica
            return 0
        with open(args.out, "w") as handle:
            json.dump(result.to_dict(), handle, indent=2)
    except Exception as err:  # noqa: BLE001 - every failure ends as one line and status 2
        message = str(err).splitlines()[0] if str(err) else ""
        print(f"verify: {type(err).__name__}: {message}", file=sys.stderr, flush=True)
        return 2
    print("\n".join(result.lines()), flush=True)
    return 0 if result.passed else 1


class VerificationFailed(RuntimeError):
    """trainer.verify: the replicas do not make one device's update; the message says where."""


def verified(job: TrainJob, hardware: str) -> Verification:
    """trainer.verify: `lockstep verify`'s check (trainer_module/equivalence.py), before
    training, in a process of its own (it needs CPU replicas of its own), at the batch the plan
    gives this run's hardware; a failure stops the run."""
    result = run_in_subprocess(job, hardware=hardware)
    for line in result.lines():
        logging.info(line)
    if not result.passed:
        raise VerificationFailed(result.lines()[-1] + " (trainer.verify; `lockstep verify` "
                                 "prints the same)")
    return result


def run_in_subprocess(job: TrainJob, replicas: int = 2, steps: int = 3, timeout: float = 600,
                      tolerance: float | None = None, workers: int = 1,
                      hardware: str = "", optimizer: str = SGD) -> Verification:
    """`check` in a fresh process (this one's TensorFlow may have started with other devices),
    or in `workers` processes on loopback (one replica each; replicas is then workers).

    The children inherit this environment, PYTHONPATH included (the user's hooks must import
    there); lockstep's own package is added after it. Raises VerifyError, one line with a
    child's last line on stderr, when one fails or the chief's status disagrees with its result.
    """
    replicas = workers if workers > 1 else replicas
    env = processes.python_env(TF_USE_LEGACY_KERAS="1")
    env.pop("TF_CONFIG", None)
    cluster = [f"127.0.0.1:{port}" for port in processes.free_ports(workers)] if workers > 1 else []
    with tempfile.TemporaryDirectory(prefix="lockstep-verify-") as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
        with open(job_path, "w") as handle:
            handle.write(job.to_json())
        command = [sys.executable, "-m", "trainer_module.verify_process", job_path, out_path,
                   "--replicas", str(replicas), "--steps", str(steps), "--workers", str(workers)]
        command += ["--tolerance", str(tolerance)] if tolerance is not None else []
        command += ["--hardware", hardware] if hardware else []
        command += ["--optimizer", optimizer] if optimizer != SGD else []
        children = []
        for index in range(workers):
            worker_env = dict(env, TF_CONFIG=json.dumps(
                {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
                             ) if cluster else env
            # Files, not pipes: a worker blocked on a full pipe would stall the others' all-reduce.
            log = open(os.path.join(tmp, f"worker-{index}.log"), "w+")  # noqa: SIM115 - closed by _wait
            children.append((subprocess.Popen(command, env=worker_env, stdout=subprocess.DEVNULL,
                                              stderr=log, text=True), log))
        outputs = _wait(children, timeout, f"{replicas} replicas, {steps} steps")
        children = [child for child, _ in children]
        result = None
        if children[0].returncode in (0, 1) and os.path.exists(out_path):
            with open(out_path) as handle:
                result = Verification.from_dict(json.load(handle))
    failed = [(child.returncode, err) for child, err in zip(children, outputs)
              if child.returncode not in (0, 1)]
    if result is None or failed or children[0].returncode != (0 if result.passed else 1):
        failed.sort(key=lambda item: item[0] != 2)  # the one that failed, not one killed after
        status, stderr = failed[0] if failed else (children[0].returncode, outputs[0])
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
        raise VerifyError(f"python -m trainer_module.verify_process exited with status {status}: "
                          f"{last.strip().removeprefix('verify: ')}")
    return result


def _wait(children: list, timeout: float, what: str) -> list[str]:
    """Each child's stderr, from its (process, log file). A child that fails (status 2 or a
    signal) ends the others, which would wait for it in the all-reduce; VerifyError when they
    outlast `timeout` together."""
    deadline = time.monotonic() + timeout
    try:
        while any(child.poll() is None for child, _ in children):
            failed = any(child.returncode not in (None, 0, 1) for child, _ in children)
            if failed or time.monotonic() > deadline:
                for child, _ in children:
                    if child.poll() is None:
                        child.kill()
                        child.wait()
                if not failed:
                    raise VerifyError(f"verify: no result after {timeout:g} s ({what})")
            time.sleep(0.2)
    finally:
        errors = []
        for _, log in children:
            log.seek(0)
            errors.append(log.read())
            log.close()
    return errors


if __name__ == "__main__":
    processes.entry_imports_done()  # runtime/__init__.py: its imports made uncollected
    sys.exit(main())
