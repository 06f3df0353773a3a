"""Runs one TrainJob in this process (for the resume and multi-worker tests).

usage: train_job.py JOB.json RESULT.json [--kill-at STEP]
--kill-at: SIGKILL this process once the global step reaches STEP (a real, unclean kill).
"""

import json
import os
import signal
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import logging

from trainer_module import train
from trainer_module.job import TrainJob

logging.set_verbosity(logging.INFO)


def main(argv):
    with open(argv[1]) as handle:
        job = TrainJob.from_json(handle.read())
    callbacks = []
    if "--kill-at" in argv:
        kill_at = int(argv[argv.index("--kill-at") + 1])

        def kill(step, logs):
            if step >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        callbacks.append(kill)
    result = train.train_job(job, callbacks=callbacks)
    json.dump(result.to_dict(), open(argv[2], "w"))


if __name__ == "__main__":
    main(sys.argv)
