"""Python-function TFX components for tests/test_dag_runner.py: each records where and when it
ran (a JSON line: node, pid, start, end) to a file, sleeps, and fails when told to; told to
swallow, it catches the first that many exceptions raised while it sleeps (a SIGTERM's Stopped),
as code that catches every exception would. Each also writes its name to `record`.started as its
own code begins, so a test can signal once a node's code (not only the launcher around it) runs."""

import json
import os
import time

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts


@component
def Step(name: Parameter[str], record: Parameter[str], seconds: Parameter[float],
         fail: Parameter[int] = 0, swallow: Parameter[int] = 0):
    start = time.time()
    with open(record + ".started", "a") as out:
        out.write(name + "\n")
    swallowed = 0
    while True:
        try:  # the loop's test inside too: a signal may be raised between any two bytecodes
            if time.time() >= start + seconds:
                break
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


@component
def Produce(text: Parameter[str], out: OutputArtifact[standard_artifacts.Schema]):
    """Writes `text` as a schema file, and a second file in a subdirectory (as statistics have)."""
    os.makedirs(os.path.join(out.uri, "Split-train"), exist_ok=True)
    with open(os.path.join(out.uri, "schema.pbtxt"), "w") as handle:
        handle.write(text)
    with open(os.path.join(out.uri, "Split-train", "FeatureStats.pb"), "wb") as handle:
        handle.write(text.encode() * 100)


@component
def Consume(schema: InputArtifact[standard_artifacts.Schema], record: Parameter[str]):
    """Appends what it read to `record`."""
    with open(os.path.join(schema.uri, "schema.pbtxt")) as handle, open(record, "a") as out:
        out.write(handle.read() + "\n")
