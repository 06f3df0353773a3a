"""The HTTP side the tests' REST stand-ins share (tests/kfp_standin.py, tests/vertex_standin.py):
a quiet handler that reads a JSON body and writes a JSON answer; each stand-in routes."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    """Subclasses define `answer(method)`; GET, POST and DELETE all go there."""

    def answer(self, method: str) -> None:
        raise NotImplementedError

    def json_body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def send_json(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer("GET")

    def do_POST(self):
        self.answer("POST")

    def do_DELETE(self):
        self.answer("DELETE")

    def log_message(self, *args):
        pass
