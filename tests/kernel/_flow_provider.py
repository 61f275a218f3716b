"""A fake OpenAI-compatible provider on a loopback socket, run on its own thread: it measures
its own calls (arrival times, most in flight at once, tokens it reported) and answers the
kernel's tasks (``interpret`` proposes a lookup, ``compose`` a short text). ``throttle_at``
answers that request (1-based) with ``429`` and ``Retry-After: retry_after``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

ANSWERS: dict[str, Any] = {
    "interpret": {
        "intentions": [{"capability": "orders.lookup", "input": {"order_id": "42"}}],
        "answer": None,
        "reply": None,
    },
    "compose": {"text": "Order 42 shipped.", "citations": []},
}


class FakeProvider:
    def __init__(
        self,
        *,
        delay: float = 0.0,
        usage: tuple[int, int] = (100, 20),
        throttle_at: int | None = None,
        retry_after: float = 2.0,
    ) -> None:
        self.delay = delay
        self.usage = usage
        self.throttle_at = throttle_at
        self.retry_after = retry_after
        self.arrivals: list[float] = []
        self.answered: list[tuple[float, int]] = []
        """(time, status) of every answer sent."""
        self.inside = 0
        self.most_inside = 0
        self.tokens = 0
        self.url = ""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=256)
        )
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        self._ready.set()
        self._loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length))
                status, payload, extra = await self._answer(body)
                data = json.dumps(payload).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n%bcontent-length: %d"
                    b"\r\n\r\n%b" % (status, extra, len(data), data)
                )
                await writer.drain()
                with self._lock:
                    self.answered.append((time.monotonic(), status))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, body: dict[str, Any]) -> tuple[int, Any, bytes]:
        with self._lock:
            self.arrivals.append(time.monotonic())
            number = len(self.arrivals)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            await asyncio.sleep(self.delay)
            if number == self.throttle_at:
                error = {"error": {"message": "slow down", "type": "rate_limit", "code": None}}
                return 429, error, b"retry-after: %d\r\n" % int(self.retry_after)
            task = body["response_format"]["json_schema"]["name"]
            with self._lock:
                self.tokens += sum(self.usage)
            return 200, _completion(body["model"], ANSWERS[task], self.usage), b""
        finally:
            with self._lock:
                self.inside -= 1


def _completion(model: str, answer: Any, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }
