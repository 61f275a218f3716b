"""``scripts/demo --model``: the demo on a real provider's SDK, here an OpenAI-compatible server
on loopback answering in the documented Chat Completions format (no network, no real key)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from intention_kernel.contracts.gateway import ModelRequest
from intention_kernel.demo import cli
from intention_kernel.examples.travel_desk._model import compose, interpret


def _completion(answer: object) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(answer), "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


class _Desk(BaseHTTPRequestHandler):
    """Answers each kernel task as the travel desk's scripted model would."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        task = body["response_format"]["json_schema"]["name"]
        request = ModelRequest(task=task, input=json.loads(body["messages"][-1]["content"]))
        answer = compose(request) if task == "compose" else interpret(request)
        data = json.dumps(_completion(answer)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Desk)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_demo_runs_on_a_model_string(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server)
    assert cli(["--model", "openai:gpt-4.1-mini", "--dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "model: openai:gpt-4.1-mini" in out
    assert "Please confirm" in out and "Booked: Alfama Inn" in out  # the demo's checks passed
    assert "its replay: 0 calls" in out  # a replay costs no model call


def test_a_missing_key_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli(["--model", "openai:gpt-4.1-mini"]) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "Traceback" not in err
