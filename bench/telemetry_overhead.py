"""Kernel time per SQLite no-effect turn with OpenTelemetry off and on, side by side in one run.

    .venv/bin/python bench/telemetry_overhead.py [--turns 300] [--reps 7] [--dir DIR]

The turn: the travel desk's "Is breakfast included?" (interpret -> one read -> compose ->
commit) with the scripted model, on the embedded SQLite store (WAL, ``synchronous=FULL``).
Three modes, each on its own database file, run in blocks of ``--turns`` turns, alternating
(the order rotates every repetition so drift hits every mode alike):

- ``absent``: telemetry disabled, as when the ``otel`` extra is not installed;
- ``off``: the OpenTelemetry API with no SDK configured (the default for a host that does
  not trace): one non-recording span per turn;
- ``on``: the SDK: a ``TracerProvider`` with a ``BatchSpanProcessor`` and an exporter that
  drops the batches, and a ``MeterProvider`` with an in-memory reader (every span, attribute
  and metric of the turn is built and recorded).

Reports the median per-turn time of each mode over the repetitions and the ratios on/off and
off/absent (goal: on/off <= 1.05). Writes ``bench/results/telemetry_overhead.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import CompiledAgent, Kernel
from intention_kernel.telemetry import Telemetry

RESULTS = Path(__file__).resolve().parent / "results" / "telemetry_overhead.json"
MODES = ("absent", "off", "on")
QUESTION = "Is breakfast included?"


class Dropping(SpanExporter):
    """Accepts every batch and keeps nothing: the cost of the SDK, not of a network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class Mode:
    """One mode's kernel, store and counters."""

    def __init__(self, name: str, store: SQLiteDurability) -> None:
        self.name = name
        self.store = store
        self.exporter = Dropping()
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        if name == "on":
            self.tracer_provider = TracerProvider()
            self.tracer_provider.add_span_processor(BatchSpanProcessor(self.exporter))
            self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        kernel = Kernel(
            durability=store,
            model=scripted_model(),
            ports={"hotels": FakeHotelProvider()},
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
        )
        if name == "absent":
            kernel.telemetry = Telemetry(enabled=False)
        self.agent: CompiledAgent = kernel.compile(build_agent())
        self.turns = 0
        self.per_turn: list[float] = []

    async def block(self, turns: int) -> float:
        """Run ``turns`` turns (a new thread every 20 turns); returns seconds per turn."""
        gc.collect()
        started = time.perf_counter()
        for _ in range(turns):
            n = self.turns
            self.turns += 1
            await self.agent.run(thread_id=f"t{n // 20}", turn_id=f"u{n}", text=QUESTION)
        return (time.perf_counter() - started) / turns

    def close(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


async def measure(directory: Path, turns: int, reps: int) -> dict[str, Any]:
    stores = {m: await SQLiteDurability.open(directory / f"{m}.db") for m in MODES}
    modes = {m: Mode(m, stores[m]) for m in MODES}
    try:
        for mode in modes.values():  # warm up: imports, caches, the first thread
            await mode.block(max(20, turns // 5))
        for rep in range(reps):
            order = MODES[rep % 3 :] + MODES[: rep % 3]
            for name in order:
                modes[name].per_turn.append(await modes[name].block(turns))
    finally:
        for mode in modes.values():
            mode.close()
        for store in stores.values():
            await store.close()
    median = {m: statistics.median(modes[m].per_turn) for m in MODES}
    ratios_on_off = [
        on / off for on, off in zip(modes["on"].per_turn, modes["off"].per_turn, strict=True)
    ]
    return {
        "median_ms_per_turn": {m: round(v * 1000, 4) for m, v in median.items()},
        "blocks_ms_per_turn": {m: [round(v * 1000, 4) for v in modes[m].per_turn] for m in MODES},
        "ratio_on_off": round(median["on"] / median["off"], 4),
        "ratio_on_off_median_of_blocks": round(statistics.median(ratios_on_off), 4),
        "ratio_off_absent": round(median["off"] / median["absent"], 4),
        "spans_exported_on": modes["on"].exporter.spans,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns per block")
    parser.add_argument("--reps", type=int, default=7, help="blocks per mode")
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        found = asyncio.run(measure(Path(tmp), args.turns, args.reps))
    report = {
        "benchmark": "telemetry_overhead",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "settings": {"turns_per_block": args.turns, "reps": args.reps, "store": "sqlite"},
        "turn": "travel desk FAQ: interpret -> one read -> compose -> commit (no effect)",
        **found,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    medians = found["median_ms_per_turn"]
    for mode in MODES:
        print(f"{mode:>6}: {medians[mode]:.3f} ms per turn")
    by_block = found["ratio_on_off_median_of_blocks"]
    print(f"on/off = {found['ratio_on_off']:.3f} (median of the per-block ratios {by_block:.3f})")
    print(f"off/absent = {found['ratio_off_absent']:.3f}")
    print(f"wrote {RESULTS}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
