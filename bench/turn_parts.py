"""The pure-Python parts of a turn, each timed alone: what the client spends besides the driver.

    .venv/bin/python bench/turn_parts.py [--number 2000] [--repeat 7] [--out FILE]

Times, with ``timeit`` (the minimum of ``--repeat`` runs of ``--number`` calls, in microseconds
per call), the work every turn of the turn benchmarks does in Python outside the database
driver, on their payloads (``_payloads.py``):

- building the turn's models (the application's side: ``result_for`` and ``events_for``);
- the commit's checks and encoding (``TurnScope.commit`` before its statement: the result and
  the outbox events checked, the JSON values checked by the codec's rule, the result and the
  events serialized and verified);
- decoding the head checkpoint that opens the next turn (as written by this process, and as
  written by another one).

The sum, set against the client CPU per turn of ``postgres_turns`` and its asyncpg floor, says
what the rest (engine, lease, connections, asyncio) costs. Writes
``bench/results/turn_parts.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _payloads import events_for, result_for

from intention_kernel import DurableTurnResult
from intention_kernel.contracts import codec
from intention_kernel.durability import _turns
from intention_kernel.durability._documents import decode_model, decode_own_model, encode_model

RESULTS = Path(__file__).resolve().parent / "results" / "turn_parts.json"
LIMITS = codec.DEFAULT_LIMITS


class _Checkpoint:
    revision = 4


class _Scope:
    """What ``result_for`` and ``events_for`` read of a turn scope."""

    thread_id = "thread-1"
    turn_id = "t5"
    checkpoint = _Checkpoint()


def parts() -> dict[str, Callable[[], Any]]:
    scope: Any = _Scope()
    result = result_for(scope)
    events = events_for(scope)
    text = encode_model(result, limits=LIMITS, what="turn result")

    def commit_checks() -> None:
        checked = _turns.check_result(result, thread_id="thread-1", turn_id="t5", loaded_revision=4)
        outbox = _turns.check_outbox(events, thread_id="thread-1", turn_id="t5", limits=LIMITS)
        codec.check(checked.response, limits=LIMITS, what="turn response")
        encode_model(checked, limits=LIMITS, what="turn result")
        texts = [encode_model(e, limits=LIMITS, what="outbox event") for e in outbox]
        _turns.check_outbox_size(texts, limits=LIMITS)

    return {
        "build the turn's result (application)": lambda: result_for(scope),
        "build three outbox events (application)": lambda: events_for(scope),
        "commit: checks and encoding": commit_checks,
        "  of which: check the outbox": lambda: _turns.check_outbox(
            events, thread_id="thread-1", turn_id="t5", limits=LIMITS
        ),
        "  of which: check the response (codec rule)": lambda: codec.check(
            result.response, limits=LIMITS
        ),
        "  of which: encode the result": lambda: encode_model(result, limits=LIMITS, what="r"),
        "open: decode the head written by this process": lambda: decode_own_model(
            DurableTurnResult, text, what="checkpoint", thread_id="thread-1"
        ),
        "open: decode a head written elsewhere": lambda: decode_model(
            DurableTurnResult, text, what="checkpoint", thread_id="thread-1"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    timings: dict[str, float] = {}
    for name, call in parts().items():
        best = min(timeit.repeat(call, number=args.number, repeat=args.repeat))
        timings[name] = round(best / args.number * 1e6, 1)
        print(f"{name:<48} {timings[name]:>8.1f} us", flush=True)
    per_turn = sum(v for k, v in timings.items() if not k.startswith(" ") and "elsewhere" not in k)
    print(f"{'every turn (the lines not indented, own head)':<48} {per_turn:>8.1f} us")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "turn_parts",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {"number": args.number, "repeat": args.repeat},
        "us_per_call": timings,
        "us_per_turn": round(per_turn, 1),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
