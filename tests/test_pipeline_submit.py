"""`harnessrl submit` drives the real kfp.Client against a KFP v2beta1 REST API on loopback.

The server here answers the four calls a submission makes (healthz, find experiment, create
experiment, create run) and records what it was sent, so the test checks the pipeline that would
reach a cluster, through the client's own HTTP path.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from harnessrl.cli import main


class FakeKfpApi(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, dict]]] = []

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.received.append(("GET", self.path, {}))
        if self.path.startswith("/apis/v2beta1/healthz"):
            self._reply({"multi_user": False})
        elif self.path.startswith("/apis/v2beta1/experiments"):
            self._reply({"experiments": [], "total_size": 0})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        self.received.append(("POST", self.path, body))
        if self.path == "/apis/v2beta1/experiments":
            self._reply({"experiment_id": "exp-1", "display_name": body["display_name"]})
        elif self.path == "/apis/v2beta1/runs":
            self._reply({"run_id": "run-42", "display_name": body["display_name"], "experiment_id": "exp-1"})
        else:
            self.send_error(404)


@pytest.fixture
def kfp_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeKfpApi)
    FakeKfpApi.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_submit_creates_experiment_and_run_with_the_compiled_pipeline(kfp_api: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pipeline.yaml"
    rc = main(
        [
            "submit",
            "--host",
            kfp_api,
            "--experiment",
            "nightly",
            "recipe=qwen_coder_7b",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "run id: run-42" in printed
    assert f"url: {kfp_api}/#/runs/details/run-42" in printed

    posts = {path: body for method, path, body in FakeKfpApi.received if method == "POST"}
    assert posts["/apis/v2beta1/experiments"]["display_name"] == "nightly"
    run = posts["/apis/v2beta1/runs"]
    assert run["experiment_id"] == "exp-1"
    spec = run["pipeline_spec"]
    assert spec["pipeline_spec"]["pipelineInfo"]["name"] == "harnessrl-qwen-coder-7b"
    assert set(spec["pipeline_spec"]["root"]["dag"]["tasks"]) == {
        "data",
        "base",
        "cpt",
        "sft",
        "rl",
        "long-horizon",
        "evaluate",
    }
    executors = spec["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-sft"]["nodeSelector"]["labels"] == {"harnessrl.io/pool": "gpu-h100"}
