"""Kernel time per SQLite no-effect turn with OpenTelemetry off and on, side by side in one run.

    .venv/bin/python bench/telemetry_overhead.py [--turns 300] [--reps 9] [--dir DIR]

The turn: the travel desk's "Is breakfast included?" (interpret -> one read -> compose ->
commit) with the scripted model, on the embedded SQLite store (WAL, ``synchronous=FULL``).
Three modes, each on its own database file, run in blocks of ``--turns`` turns, alternating
(the order rotates every repetition so drift hits every mode alike):

- ``absent``: telemetry disabled, as when the ``otel`` extra is not installed;
- ``off``: the OpenTelemetry API with no SDK configured (the default for a host that does
  not trace): one non-recording span per turn;
- ``on``: the SDK: a ``TracerProvider`` with a ``BatchSpanProcessor`` and an exporter that
  drops the batches, and a ``MeterProvider`` with an in-memory reader (every span, attribute
  and metric of the turn is built and recorded);
- ``sampled``: as ``on`` with a ``ParentBased(TraceIdRatioBased(0.1))`` sampler: one turn in
  ten is traced, every turn is measured (what a host that needs less overhead runs).

A fourth block in the rotation, ``sdk_floor``, is what the SDK alone costs for the same work:
the turn's five spans (same names, kinds, attributes, nesting, each current while it runs)
and six histogram points (same attribute sets), made directly through the same kind of
providers with no kernel around them. Each sample is taken twice: right after an ``off`` turn
(``after_a_turn``: the SDK's code and data are no longer in the CPU caches, as inside a
turn) and right after that (``warm``: a tight loop, the lower bound). ``on - off -
sdk_floor`` is what the kernel adds on top (its own telemetry code, the ``traceparent`` on
every event, the garbage collector's extra passes over the SDK's objects, and the SDK's
calls being spread over the turn rather than back to back).

Reports, per mode, the median over the repetitions of the wall time per turn, of the main
thread's CPU time per turn (less sensitive to other processes on a busy machine) and of the
garbage collector's time per turn, then the ratios on/off and off/absent (goal: on/off <=
1.05) and the floor. Writes ``bench/results/telemetry_overhead.json``.
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
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import CompiledAgent, Kernel
from intention_kernel.telemetry import Telemetry

RESULTS = Path(__file__).resolve().parent / "results" / "telemetry_overhead.json"
MODES = ("absent", "off", "on", "sampled")
SAMPLED = 0.1
"""The share of turns ``sampled`` traces."""
QUESTION = "Is breakfast included?"


class Dropping(SpanExporter):
    """Accepts every batch and keeps nothing: the cost of the SDK, not of a network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class GcClock:
    """Time spent in the garbage collector while ``running`` (all generations)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._started

    def close(self) -> None:
        gc.callbacks.remove(self._tick)


class Block:
    """Per-turn figures of one block: wall time, main thread CPU, garbage collection."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.gc: list[float] = []

    async def timed(
        self, run: Callable[[int], Awaitable[None]], turns: int, clock: GcClock
    ) -> None:
        gc.collect()
        collected, cpu, started = clock.spent, time.thread_time(), time.perf_counter()
        await run(turns)
        self.wall.append((time.perf_counter() - started) / turns)
        self.cpu.append((time.thread_time() - cpu) / turns)
        self.gc.append((clock.spent - collected) / turns)


def sdk_providers(
    exporter: SpanExporter, sampler: Sampler | None = None
) -> tuple[TracerProvider, MeterProvider]:
    """What ``on`` uses: a batch processor in front of ``exporter``, an in-memory reader."""
    tracer_provider = TracerProvider(sampler=sampler)
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


class Floor:
    """The SDK's own cost of one turn's telemetry, made directly (no kernel, no wrapper)."""

    def __init__(self) -> None:
        self.exporter = Dropping()
        self.tracer_provider, self.meter_provider = sdk_providers(self.exporter)
        self.tracer = self.tracer_provider.get_tracer("floor")
        meter = self.meter_provider.get_meter("floor")
        self.durations = meter.create_histogram("ik.turn.duration", unit="s")
        self.lease = meter.create_histogram("ik.lease.wait", unit="s")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
        self.turns = 0
        self.after_a_turn: list[float] = []
        self.warm: list[float] = []

    def _span(
        self,
        name: str,
        started: dict[str, Any] | None,
        ended: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
        points: Sequence[dict[str, Any]] = (),
    ) -> None:
        span = self.tracer.start_span(name, kind=kind, attributes=started)
        token = otel_context.attach(trace.set_span_in_context(span))
        for attributes in points:
            self.tokens.record(30, attributes)
        span.set_attributes(ended)
        otel_context.detach(token)
        span.end()

    def turn(self) -> None:
        """``ik.turn`` with ``chat`` (interpret), ``ik.plan``, ``ik.step``, ``chat`` (compose)
        as children, two token points per chat, and the lease wait and duration points."""
        n = self.turns
        self.turns += 1
        started = time.perf_counter()
        turn = self.tracer.start_span(
            "ik.turn",
            attributes={
                "ik.agent.id": "travel-desk",
                "ik.agent.version": "1.0.0",
                "ik.agent.fingerprint": "ik1-" + "0" * 64,
                "ik.thread.id": f"t{n // 20}",
                "ik.turn.id": f"u{n}",
                "db.system.name": "sqlite",
            },
        )
        token = otel_context.attach(trace.set_span_in_context(turn))
        self.lease.record(0.0004, {"ik.agent.id": "travel-desk", "db.system.name": "sqlite"})
        self._chat("interpret")
        self._span(
            "ik.plan", None, {"ik.plan.steps": 1, "ik.plan.held": 0, "ik.plan.clarifications": 0}
        )
        self._span(
            "ik.step desk.faq",
            {
                "ik.capability.id": "desk.faq",
                "ik.capability.version": "1.0.0",
                "ik.capability.effect": "read",
                "ik.step.id": "step-1",
            },
            {"ik.step.status": "completed"},
        )
        self._chat("compose")
        self.durations.record(
            time.perf_counter() - started,
            {"ik.agent.id": "travel-desk", "ik.turn.outcome": "committed"},
        )
        otel_context.detach(token)
        turn.set_attributes(
            {"ik.lease.wait_ms": 0.4, "ik.turn.outcome": "committed", "ik.turn.replayed": False}
        )
        turn.end()

    def _chat(self, task: str) -> None:
        asked = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "ScriptedModelGateway",
            "ik.model.task": task,
        }
        self._span(
            "chat ScriptedModelGateway",
            asked,
            {"gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0},
            SpanKind.CLIENT,
            ({**asked, "gen_ai.token.type": "input"}, {**asked, "gen_ai.token.type": "output"}),
        )

    async def sample(self, turns: int, before: Callable[[int], Awaitable[None]]) -> None:
        """``turns`` samples, each after one turn of ``before`` (not timed)."""
        gc.collect()
        for _ in range(turns):
            await before(1)
            started = time.perf_counter()
            self.turn()
            between = time.perf_counter()
            self.turn()
            self.after_a_turn.append(between - started)
            self.warm.append(time.perf_counter() - between)

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


class Mode:
    """One mode's kernel, store and counters."""

    def __init__(self, name: str, store: SQLiteDurability) -> None:
        self.name = name
        self.store = store
        self.exporter = Dropping()
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        if name == "on":
            self.tracer_provider, self.meter_provider = sdk_providers(self.exporter)
        elif name == "sampled":
            self.tracer_provider, self.meter_provider = sdk_providers(
                self.exporter, ParentBased(TraceIdRatioBased(SAMPLED))
            )
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
        self.block = Block()

    async def run(self, turns: int) -> None:
        """Run ``turns`` turns (a new thread every 20 turns)."""
        for _ in range(turns):
            n = self.turns
            self.turns += 1
            await self.agent.run(thread_id=f"t{n // 20}", turn_id=f"u{n}", text=QUESTION)

    def close(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


async def measure(directory: Path, turns: int, reps: int) -> dict[str, Any]:
    stores = {m: await SQLiteDurability.open(directory / f"{m}.db") for m in MODES}
    modes = {m: Mode(m, stores[m]) for m in MODES}
    floor = Floor()
    names = (*MODES, "sdk_floor")
    clock = GcClock()
    try:
        for mode in modes.values():  # warm up: imports, caches, the first thread
            await mode.run(max(20, turns // 5))
        await floor.sample(max(20, turns // 5), modes["off"].run)
        floor.after_a_turn.clear()
        floor.warm.clear()
        for rep in range(reps):
            k = rep % len(names)
            for name in names[k:] + names[:k]:  # the order rotates: drift hits every mode
                if name == "sdk_floor":
                    await floor.sample(turns, modes["off"].run)
                else:
                    await modes[name].block.timed(modes[name].run, turns, clock)
    finally:
        clock.close()
        floor.close()
        for mode in modes.values():
            mode.close()
        for store in stores.values():
            await store.close()
    wall = {m: statistics.median(modes[m].block.wall) for m in MODES}
    cpu = {m: statistics.median(modes[m].block.cpu) for m in MODES}
    collecting = {m: statistics.median(modes[m].block.gc) for m in MODES}
    cold, warm = statistics.median(floor.after_a_turn), statistics.median(floor.warm)
    ratios_on_off = [
        on / off for on, off in zip(modes["on"].block.wall, modes["off"].block.wall, strict=True)
    ]
    added = wall["on"] - wall["off"]
    added_cpu = cpu["on"] - cpu["off"]
    return {
        "median_ms_per_turn": {m: round(wall[m] * 1000, 4) for m in MODES},
        "blocks_ms_per_turn": {m: [round(v * 1000, 4) for v in modes[m].block.wall] for m in MODES},
        "median_main_thread_cpu_us_per_turn": {m: _us(cpu[m]) for m in MODES},
        "median_gc_us_per_turn": {m: _us(collecting[m]) for m in MODES},
        "ratio_on_off": round(wall["on"] / wall["off"], 4),
        "ratio_on_off_median_of_blocks": round(statistics.median(ratios_on_off), 4),
        "ratio_on_off_main_thread_cpu": round(cpu["on"] / cpu["off"], 4),
        "ratio_off_absent": round(wall["off"] / wall["absent"], 4),
        "ratio_sampled_off": round(wall["sampled"] / wall["off"], 4),
        "ratio_sampled_off_main_thread_cpu": round(cpu["sampled"] / cpu["off"], 4),
        "on_minus_off_us": _us(added),
        "on_minus_off_main_thread_cpu_us": _us(added_cpu),
        "sdk_floor_us": {"after_a_turn": _us(cold), "warm": _us(warm)},
        # The floor is a median of single samples (a garbage collection or an export by the
        # batch processor's thread lands in few of them); the blocks' times are means.
        "sdk_floor_mean_us": {
            "after_a_turn": _us(statistics.fmean(floor.after_a_turn)),
            "warm": _us(statistics.fmean(floor.warm)),
        },
        "sdk_floor_ratio_of_off": {
            "after_a_turn": round((wall["off"] + cold) / wall["off"], 4),
            "warm": round((wall["off"] + warm) / wall["off"], 4),
        },
        "beyond_sdk_floor_us": _us(added - cold),
        "beyond_sdk_floor_main_thread_cpu_us": _us(added_cpu - cold),
        "spans_exported_on": modes["on"].exporter.spans,
        "spans_exported_sampled": modes["sampled"].exporter.spans,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns per block")
    parser.add_argument("--reps", type=int, default=9, help="blocks per mode")
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
        "telemetry_per_turn": "5 spans (ik.turn, 2x chat, ik.plan, ik.step), 6 histogram points",
        **found,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    medians = found["median_ms_per_turn"]
    cpu = found["median_main_thread_cpu_us_per_turn"]
    collecting = found["median_gc_us_per_turn"]
    for mode in MODES:
        print(
            f"{mode:>6}: {medians[mode]:.3f} ms per turn"
            f" (main thread CPU {cpu[mode]:.0f} us, gc {collecting[mode]:.0f} us)"
        )
    by_block = found["ratio_on_off_median_of_blocks"]
    print(f"on/off = {found['ratio_on_off']:.3f} (median of the per-block ratios {by_block:.3f})")
    print(f"on/off main thread CPU = {found['ratio_on_off_main_thread_cpu']:.3f}")
    print(f"off/absent = {found['ratio_off_absent']:.3f}")
    print(
        f"sampled/off = {found['ratio_sampled_off']:.3f}"
        f" (main thread CPU {found['ratio_sampled_off_main_thread_cpu']:.3f}; {SAMPLED:.0%} traced)"
    )
    floor, floor_ratio = found["sdk_floor_us"], found["sdk_floor_ratio_of_off"]
    print(
        f"on - off = {found['on_minus_off_us']:.0f} us per turn"
        f" (main thread CPU {found['on_minus_off_main_thread_cpu_us']:.0f} us)"
    )
    print(
        f"SDK floor (5 spans, 6 points, no kernel): {floor['after_a_turn']:.0f} us after a turn"
        f" ({floor_ratio['after_a_turn']:.3f}x off), {floor['warm']:.0f} us warm"
        f" ({floor_ratio['warm']:.3f}x off)"
    )
    print(
        f"beyond the floor: {found['beyond_sdk_floor_us']:.0f} us"
        f" (main thread CPU {found['beyond_sdk_floor_main_thread_cpu_us']:.0f} us)"
    )
    print(f"wrote {RESULTS}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
