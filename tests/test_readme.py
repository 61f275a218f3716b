"""The README's durability quickstart runs as written (with a stand-in payment provider)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


class _Payments:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create_charge(self, *, idempotency_key: str) -> dict[str, Any]:
        self.calls.append(idempotency_key)
        return {"charge_id": "ch_1"}


def test_durability_quickstart_runs_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    [quickstart] = [b for b in blocks if "open_durability" in b]
    monkeypatch.chdir(tmp_path)
    payments = _Payments()
    for _ in range(2):  # the second run is a replay: no second charge
        exec(compile(quickstart, "README.md", "exec"), {"payments": payments, "__name__": "readme"})
    assert payments.calls == ["payments.charge:pi_123"]
    assert os.path.exists(tmp_path / "app.db")
