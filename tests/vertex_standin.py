"""A stand-in of Vertex AI's job service (REST, v1) on 127.0.0.1 that records every request, for
driving the real google-cloud-aiplatform client in tests. A created custom job goes through the
states its `script` lists, one per poll (default: running, then succeeded); or, with
`run_containers`, its replicas really run here as processes, the job running while any does and
succeeding when all exit 0, failing as the first to fail (the other replicas are ended, as Vertex
ends a job). `fail` answers the next create with an API error.

A job of GPU machines (worker pools with an accelerator) runs each pool's every replica as a
process with the environment Vertex gives it: CLUSTER_SPEC (the pools by Vertex's names,
workerpool0 and workerpool1) and TF_CONFIG (the chief and the workers), with loopback addresses,
so the processes train as one MultiWorkerMirroredStrategy cluster (one CPU replica each, standing
in for a machine's GPUs). `preempt_when(job name)`, asked at each poll of a running job, takes a
worker's machine away (SIGKILL) when it answers true: the job fails as Vertex reports a
preemption, and its other replicas are ended. With `sigterm_grace` (seconds) the machine is
preempted as Vertex and GKE do it: SIGTERM to that worker, the job running on while any replica
does, SIGKILL to what is left once the grace period is over; then the job fails as preempted,
and `stopped_in[job name]` holds the seconds from the SIGTERM until every replica had exited.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlparse

from json_http import JsonHandler
from runtime.processes import free_ports

PREFIX = "/v1/"
PREEMPTED = {"code": 14, "message": "The replica workerpool1-0 was preempted"}


def last_line(process: subprocess.Popen) -> str:
    """The last line a replica wrote to stderr (its file)."""
    process.log.seek(0)
    lines = process.log.read().strip().splitlines()
    return lines[-1] if lines else "exited"


class VertexStandIn:
    def __init__(self, script: list[dict] | None = None, run_containers: bool = False,
                 env: dict[str, str] | None = None,
                 preempt_when: Callable[[str], bool] | None = None,
                 sigterm_grace: float | None = None):
        self.requests: list[dict] = []
        self.jobs: dict[str, dict] = {}
        self.script = script or [{"state": "JOB_STATE_RUNNING"}, {"state": "JOB_STATE_SUCCEEDED"}]
        self.scripts: list[list[dict]] = []  # one script per create, in order (else `script`)
        self.run_containers, self.env = run_containers, env or {}
        self.preempt_when = preempt_when
        self.sigterm_grace = sigterm_grace
        self._sigterm_sent: dict[str, float] = {}  # job name -> when its worker got SIGTERM
        self.stopped_in: dict[str, float] = {}
        # job name -> its replicas: (pool, index, environment Vertex set, process)
        self.replicas: dict[str, list[tuple[str, int, dict, subprocess.Popen]]] = {}
        self.failures: list[tuple[int, str, str]] = []  # (http status, status name, message)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        for name, replicas in self.replicas.items():
            self._end(name)
            for *_, process in replicas:
                process.log.close()
        self._server.shutdown()
        self._server.server_close()

    def fail(self, status: int, name: str, message: str) -> None:
        self.failures.append((status, name, message))

    def creates(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["method"] == "POST"]

    def _create(self, parent: str, body: dict) -> tuple[int, dict]:
        if self.failures:
            status, name, message = self.failures.pop(0)
            return status, {"error": {"code": status, "message": message, "status": name}}
        name = f"{parent}/customJobs/{len(self.jobs) + 1}"
        script = list(self.scripts.pop(0) if self.scripts else self.script)
        self.jobs[name] = {**body, "name": name, "state": "JOB_STATE_PENDING", "script": script}
        if self.run_containers:
            self.replicas[name] = self._start(body["jobSpec"]["workerPoolSpecs"])
        return 200, self._public(name)

    def _start(self, pools: list[dict]) -> list[tuple[str, int, dict, subprocess.Popen]]:
        """A process for each replica of each pool; a GPU job's with Vertex's cluster env."""
        gpus = any(pool["machineSpec"].get("acceleratorType") for pool in pools)
        counts = [int(pool.get("replicaCount", 1)) for pool in pools]
        ports = iter(free_ports(sum(counts)))
        cluster = {f"workerpool{p}": [f"127.0.0.1:{next(ports)}" for _ in range(count)]
                   for p, count in enumerate(counts)}
        started = []
        for p, (pool, count) in enumerate(zip(pools, counts)):
            container = pool["containerSpec"]
            for index in range(count):
                vertex = {}
                if gpus:
                    task = {"type": f"workerpool{p}", "index": index}
                    vertex = {"CLUSTER_SPEC": json.dumps(
                        {"cluster": cluster, "environment": "cloud", "task": task}),
                        "TF_CONFIG": json.dumps({
                            "cluster": {"chief": cluster["workerpool0"],
                                        **({"worker": cluster["workerpool1"]}
                                           if "workerpool1" in cluster else {})},
                            "task": {"type": "chief" if p == 0 else "worker", "index": index},
                            "environment": "cloud", "job": {"job_name": "lockstep"}})}
                env = dict(os.environ, **self.env, **vertex,
                           **{e["name"]: e["value"] for e in container.get("env", [])})
                # A file, not a pipe: a replica blocked on a full pipe would stall the others.
                log = tempfile.TemporaryFile("w+")  # noqa: SIM115  read back by last_line
                process = subprocess.Popen([*container["command"], *container["args"]], env=env,
                                           stdout=subprocess.DEVNULL, stderr=log, text=True)
                process.log = log
                started.append((f"workerpool{p}", index, vertex, process))
        return started

    def log(self, name: str, replica: int = 0) -> str:
        """What a replica of the job wrote to stderr."""
        process = self.replicas[name][replica][3]
        process.log.seek(0)
        return process.log.read()

    def _end(self, name: str) -> None:
        for _, _, _, process in self.replicas.get(name, []):
            if process.poll() is None:
                process.kill()
                process.wait()


    def _ran(self, job: dict, name: str) -> None:
        """The job's state from its replicas' processes."""
        processes = [process for _, _, _, process in self.replicas[name]]
        if name in self._sigterm_sent:  # preempted with SIGTERM: running until the grace is over
            waited = time.monotonic() - self._sigterm_sent[name]
            if all(p.poll() is not None for p in processes) or waited > self.sigterm_grace:
                self._end(name)
                self.stopped_in.setdefault(name, waited)
                job.update(state="JOB_STATE_FAILED", error=dict(PREEMPTED))
            else:
                job["state"] = "JOB_STATE_RUNNING"
            return
        if all(process.poll() is None for process in processes) and self.preempt_when and \
                len(processes) > 1 and self.preempt_when(name):
            if self.sigterm_grace is not None:
                processes[-1].send_signal(signal.SIGTERM)  # the machine will be taken away
                self._sigterm_sent[name] = time.monotonic()
                job["state"] = "JOB_STATE_RUNNING"
                return
            processes[-1].send_signal(signal.SIGKILL)  # a worker's machine taken away
            self._end(name)
            job.update(state="JOB_STATE_FAILED", error=dict(PREEMPTED))
            return
        failed = next((p for p in processes if p.poll() not in (None, 0)), None)
        if failed is not None:
            self._end(name)
            job.update(state="JOB_STATE_FAILED",
                       error={"code": 13, "message": last_line(failed)})
        elif any(p.poll() is None for p in processes):
            job["state"] = "JOB_STATE_RUNNING"
        else:
            job["state"] = "JOB_STATE_SUCCEEDED"

    def _get(self, name: str) -> tuple[int, dict]:
        job = self.jobs.get(name)
        if job is None:
            return 404, {"error": {"code": 404, "message": f"{name} not found",
                                   "status": "NOT_FOUND"}}
        if name in self.replicas:
            if job["state"] not in ("JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"):
                self._ran(job, name)
        elif job["script"]:
            job.update(job["script"].pop(0))
        return 200, self._public(name)

    def _public(self, name: str) -> dict:
        return {k: v for k, v in self.jobs[name].items() if k != "script"}

    def _handler(self):
        standin = self

        class Handler(JsonHandler):
            def answer(self, method: str):
                path = urlparse(self.path).path  # the client adds `$alt=json;enum-encoding=int`
                body = self.json_body()
                standin.requests.append({"method": method, "path": path, "body": body})
                resource = path[len(PREFIX):] if path.startswith(PREFIX) else path
                if method == "POST" and resource.endswith("/customJobs"):
                    status, answer = standin._create(resource.rsplit("/customJobs", 1)[0], body)
                elif method == "GET" and "/customJobs/" in resource:
                    status, answer = standin._get(resource)
                else:
                    status, answer = 404, {"error": {"code": 404, "message": path,
                                                     "status": "NOT_FOUND"}}
                self.send_json(status, answer)

        return Handler
