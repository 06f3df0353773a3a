"""Runs one TrainJob in this process, one worker of a cluster (TF_CONFIG) or alone, for the
elastic-resume tests: the job stops once every worker has checkpointed at --stop-at; or this
process sends itself SIGTERM once it has trained --sigterm-at steps (a real signal, through
lockstep's handler), and every worker stops where they agree.

usage: elastic_worker.py JOB.json RESULT.json [--stop-at STEP] [--sigterm-at STEP [--in-fit N]]
--in-fit N: the SIGTERM comes at STEP of the job's fit N: 0 the first, 1 the refit after it
(trainer_module/refit.py), 2 a bag's second refit (trainer_module/bag.py).
Status 0 with the summary in RESULT.json; 3 when stopped at STEP; 5 (termination's
PREEMPTED_STATUS) when stopped by a SIGTERM, RESULT.json holding {"step", "signalled", "message"}.
"""

import json
import os
import signal
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import logging

from runtime import termination
from trainer_module import train
from trainer_module.job import TrainJob

logging.set_verbosity(logging.INFO)


class Stopped(Exception):
    pass


def main(argv) -> int:
    with open(argv[1]) as handle:
        job = TrainJob.from_json(handle.read())
    stop_at = int(argv[argv.index("--stop-at") + 1]) if "--stop-at" in argv else 0
    sigterm_at = int(argv[argv.index("--sigterm-at") + 1]) if "--sigterm-at" in argv else 0
    # --sigterm-at counts the steps of this fit
    in_fit = int(argv[argv.index("--in-fit") + 1]) if "--in-fit" in argv else 0
    seen = {"last": 0, "fit": 0}

    def stop(step, logs):  # an action: after the checkpoint at this step is on disk
        seen["fit"] += step < seen["last"]  # each refit starts at step 0
        seen["last"] = step
        if stop_at and step >= stop_at:
            raise Stopped(step)
        if (sigterm_at and step >= sigterm_at and not termination.requested()
                and seen["fit"] == in_fit):
            os.kill(os.getpid(), signal.SIGTERM)
    try:
        result = train.train_job(job, callbacks=[stop])
    except Stopped:
        return 3
    except termination.Preempted as stopped:
        with open(argv[2], "w") as handle:
            json.dump({"step": stopped.step, "signalled": stopped.signalled,
                       "message": str(stopped)}, handle)
        return termination.PREEMPTED_STATUS
    with open(argv[2], "w") as handle:
        json.dump(result.to_dict(), handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
