"""Python-function TFX components for tests/test_dag_runner.py: each records where and when it
ran (a JSON line: node, pid, start, end) to a file, sleeps, and fails when told to; told to
swallow, it catches the first that many exceptions raised while it sleeps (a SIGTERM's Stopped),
as code that catches every exception would."""

import json
import os
import time

from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component


@component
def Step(name: Parameter[str], record: Parameter[str], seconds: Parameter[float],
         fail: Parameter[int] = 0, swallow: Parameter[int] = 0):
    start = time.time()
    swallowed = 0
    while time.time() < start + seconds:
        try:
            time.sleep(0.02)
        except Exception:  # noqa: BLE001  as code that catches everything does
            if swallowed >= swallow:
                raise
            swallowed += 1
    if fail:
        raise ValueError(f"{name} failed as told")
    with open(record, "a") as out:
        out.write(json.dumps({"node": name, "pid": os.getpid(), "start": start,
                              "end": time.time()}) + "\n")
