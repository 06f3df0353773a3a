"""A stand-in of Vertex AI's job service (REST, v1) on 127.0.0.1 that records every request, for
driving the real google-cloud-aiplatform client in tests. A created custom job goes through the
states its `script` lists, one per poll (default: running, then succeeded); or, with
`run_containers`, its container's command really runs here as a process, the job running while
it does and succeeding or failing as it exits, as Vertex would run it on the slice. `fail`
answers the next create with an API error."""

from __future__ import annotations

import os
import subprocess
import threading
from http.server import ThreadingHTTPServer
from urllib.parse import urlparse

from json_http import JsonHandler

PREFIX = "/v1/"


class VertexStandIn:
    def __init__(self, script: list[dict] | None = None, run_containers: bool = False,
                 env: dict[str, str] | None = None):
        self.requests: list[dict] = []
        self.jobs: dict[str, dict] = {}
        self.script = script or [{"state": "JOB_STATE_RUNNING"}, {"state": "JOB_STATE_SUCCEEDED"}]
        self.scripts: list[list[dict]] = []  # one script per create, in order (else `script`)
        self.run_containers, self.env = run_containers, env or {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.failures: list[tuple[int, str, str]] = []  # (http status, status name, message)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
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
            [pool] = body["jobSpec"]["workerPoolSpecs"]
            container = pool["containerSpec"]
            env = dict(os.environ, **self.env,
                       **{e["name"]: e["value"] for e in container.get("env", [])})
            self.processes[name] = subprocess.Popen(
                [*container["command"], *container["args"]], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return 200, self._public(name)

    def _get(self, name: str) -> tuple[int, dict]:
        job = self.jobs.get(name)
        if job is None:
            return 404, {"error": {"code": 404, "message": f"{name} not found",
                                   "status": "NOT_FOUND"}}
        process = self.processes.get(name)
        if process is not None:
            if process.poll() is None:
                job["state"] = "JOB_STATE_RUNNING"
            elif process.returncode == 0:
                job["state"] = "JOB_STATE_SUCCEEDED"
            else:
                lines = process.stderr.read().strip().splitlines()
                job["state"] = "JOB_STATE_FAILED"
                job["error"] = {"code": 13, "message": lines[-1] if lines else "exited"}
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
