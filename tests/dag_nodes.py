"""Python-function TFX components for tests/test_dag_runner.py: each records where and when it
ran (a JSON line: node, pid, start, end) to a file, sleeps, and fails when told to."""

import json
import os
import time

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component


@component
def Step(name: Parameter[str], record: Parameter[str], seconds: Parameter[float],
         fail: Parameter[int] = 0):
    start = time.time()
    time.sleep(seconds)
    if fail:
        raise ValueError(f"{name} failed as told")
    with open(record, "a") as out:
        out.write(json.dumps({"node": name, "pid": os.getpid(), "start": start,
                              "end": time.time()}) + "\n")
