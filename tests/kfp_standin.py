"""A small stand-in of the Kubeflow Pipelines v2beta1 REST API on 127.0.0.1 that records every
request, for driving the real `kfp.Client` in tests. It keeps experiments, runs and recurring runs
in memory, and answers any route with an injected error status when told to."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from json_http import JsonHandler

API = "/apis/v2beta1"


class StandIn:
    def __init__(self):
        self.requests: list[dict] = []
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.recurring: dict[str, dict] = {}
        self.failures: dict[tuple[str, str], tuple[int, str]] = {}  # (method, path prefix)
        self.redirect_to: str | None = None  # answer every request with a 307 to this host
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.host = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def fail(self, method: str, path: str, status: int, message: str = "") -> None:
        self.failures[(method, API + path)] = (status, message)

    def bodies(self, method: str, path: str) -> list[dict]:
        return [r["body"] for r in self.requests if r["method"] == method and r["path"] == API + path]

    def _route(self, method: str, path: str, query: dict, body: dict):
        if path == f"{API}/healthz":
            return 200, {"multi_user": False}
        if path == f"{API}/experiments":
            if method == "GET":
                wanted = _filter_name(query)
                found = [e for e in self.experiments.values()
                         if wanted is None or e["display_name"] == wanted]
                return 200, {"experiments": found, "total_size": len(found)}
            experiment = {**body, "experiment_id": f"exp-{len(self.experiments) + 1}"}
            self.experiments[experiment["experiment_id"]] = experiment
            return 200, experiment
        if path == f"{API}/runs" and method == "POST":
            run = {**body, "run_id": f"run-{len(self.runs) + 1}", "state": "PENDING"}
            self.runs[run["run_id"]] = run
            return 200, run
        if path == f"{API}/recurringruns":
            if method == "GET":
                return 200, {"recurringRuns": list(self.recurring.values()),
                             "total_size": len(self.recurring)}
            job = {**body, "recurring_run_id": f"rr-{len(self.recurring) + 1}", "status": "ENABLED"}
            self.recurring[job["recurring_run_id"]] = job
            return 200, job
        if path.startswith(f"{API}/recurringruns/"):
            rid, _, action = path[len(f"{API}/recurringruns/"):].partition(":")
            if rid not in self.recurring:
                return 404, {"error": f"recurring run {rid} not found", "message":
                             f"recurring run {rid} not found", "code": 5}
            if method == "DELETE":
                del self.recurring[rid]
            elif action in ("enable", "disable"):
                self.recurring[rid]["status"] = "ENABLED" if action == "enable" else "DISABLED"
            return 200, {}
        return 404, {"error": "Not Found", "message": f"no route {method} {path}", "code": 5}

    def _handler(self):
        standin = self

        class Handler(JsonHandler):
            def answer(self, method):
                url = urlparse(self.path)
                body = self.json_body()
                standin.requests.append({"method": method, "path": url.path,
                                         "query": parse_qs(url.query), "body": body,
                                         "auth": self.headers.get("Authorization")})
                failure = next((v for (m, p), v in standin.failures.items()
                                if m == method and url.path.startswith(p)), None)
                if standin.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", standin.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if failure:
                    status, message = failure
                    payload = {"error": message, "message": message, "code": 3}
                else:
                    status, payload = standin._route(method, url.path, parse_qs(url.query), body)
                self.send_json(status, payload)

        return Handler


def _filter_name(query: dict) -> str | None:
    raw = (query.get("filter") or [None])[0]
    if not raw:
        return None
    for predicate in json.loads(raw).get("predicates", []):
        if predicate.get("key") in ("display_name", "name"):
            return predicate.get("string_value") or predicate.get("stringValue")
    return None
