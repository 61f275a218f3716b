"""The pure parts of the turn benchmarks' measurements (``bench/_measure.py``,
``bench/_capture.py``): ``/proc`` parsing, per-turn figures, load flags, statement counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import _measure as measure
from bench._capture import Recorder, _executions

REFERENCE = Path("/work/shared/bench/reference")


def test_proc_stat_with_spaces_and_parentheses_in_the_command_name() -> None:
    rest = " ".join(str(n) for n in range(4, 53))  # fields 4 (ppid) to 52
    stat = measure.parse_proc_stat(f"4242 (postgres: a (b) c) S {rest}\n")
    assert stat.pid == 4242
    assert stat.comm == "postgres: a (b) c"
    assert stat.state == "S"
    assert stat.ppid == 4
    assert (stat.utime, stat.stime, stat.cutime, stat.cstime) == (14, 15, 16, 17)
    assert stat.ticks == 29
    assert stat.reaped_ticks == 33


def test_proc_stat_of_this_process() -> None:
    import os

    stat = measure.read_proc_stat(os.getpid())
    assert stat is not None
    assert stat.ppid == os.getppid()
    assert measure.read_proc_stat(2**31) is None


def test_loadavg() -> None:
    load = measure.parse_loadavg("0.44 0.26 0.11 3/176 7788\n")
    assert load == {"loadavg": [0.44, 0.26, 0.11], "runnable": 3, "tasks": 176}
    now = measure.machine()
    assert now["cpus"] >= 1
    assert len(now["loadavg"]) == 3


def test_cpu_line_busy_and_total() -> None:
    text = "cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n"
    assert measure.parse_cpu_line(text) == (161, 1181)
    assert measure.parse_cpu_line("cpu 1 2 3 4\n") == (6, 10)
    with pytest.raises(ValueError, match="no cpu line"):
        measure.parse_cpu_line("intr 1 2 3\n")


def test_others_share_subtracts_the_cells_own_cpu() -> None:
    ticks = measure.TICKS
    before, after = (0, 0), (3 * ticks, 4 * ticks)  # 3 s busy out of 4 core-seconds
    assert measure.others_share(before, after, 1.0) == 0.5
    assert measure.others_share(before, after, 5.0) == 0.0  # never negative
    assert measure.others_share(None, after, 1.0) is None
    assert measure.others_share(before, after, None) is None
    assert measure.others_share(after, after, 1.0) is None


def test_load_flags() -> None:
    quiet = {"cpus": 2, "loadavg": [1.5, 1.0, 0.5]}
    busy = {"cpus": 2, "loadavg": [2.5, 1.0, 0.5]}
    assert measure.load_warning("cell", quiet) is None
    warning = measure.load_warning("cell", busy)
    assert warning is not None and "2.5 > 2 cores" in warning
    assert measure.others_warning("cell", 0.1) is None
    assert measure.others_warning("cell", None) is None
    assert "40%" in (measure.others_warning("cell", 0.4) or "")
    # measured share of other work decides; the load only when the share is unknown
    assert measure.cell_machine(busy, quiet, 0.1)["overloaded"] is False
    assert measure.cell_machine(quiet, quiet, 0.3)["overloaded"] is True
    assert measure.cell_machine(busy, quiet)["overloaded"] is True
    cell = measure.cell_machine(busy, quiet, 0.1)
    assert cell["load_above_cores"] is True
    assert cell["before"] == busy and cell["after"] == quiet


def test_per_turn_figures() -> None:
    assert measure.per_turn(10, 4) == 2.5
    assert measure.per_turn(None, 4) is None
    assert measure.per_turn(10, 0) is None
    assert measure.cpu_us_per_turn(0.5, 1000) == 500.0
    assert measure.cpu_us_per_turn(None, 1000) is None
    before = {"xact_commit": 100, "wal_sync": 7}
    after = {"xact_commit": 400, "wal_sync": 107, "new": 1}
    assert measure.deltas(before, after, 100) == {
        "xact_commit_per_turn": 3.0,
        "wal_sync_per_turn": 1.0,
    }
    assert measure.ratio(300, 600) == 0.5
    assert measure.ratio(300, 0) is None
    assert measure.ratio(None, 600) is None


def test_script_statements() -> None:
    script = "\\set n :n + 1\nSELECT 1\n\\gset s1_\nINSERT INTO x\n  VALUES (1);\n-- note\nBEGIN;\n"
    assert measure.script_statements(script) == 3
    assert measure.script_statements("SELECT a FROM t WHERE b = 1 \\gset\nEND;\n") == 2
    assert measure.script_statements("SELECT 1") == 1


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference workload not on this machine")
def test_script_statements_of_the_reference_turns() -> None:
    assert measure.script_statements((REFERENCE / "turn_1c.sql").read_text()) == 7
    assert measure.script_statements((REFERENCE / "turn_3c.sql").read_text()) == 12


def test_statements_one_call_executes() -> None:
    assert _executions("execute", ("SELECT 1",)[1:]) == 1
    assert _executions("executemany", ([(1,), (2,), (3,)],)) == 3
    assert _executions("executemany", (iter([(1,)]),)) == 1  # not sized: one
    assert _executions("fetch", ()) == 1


def test_counting_recorder_keeps_nothing() -> None:
    recorder = Recorder(keep=False)
    assert recorder.count == 0 and recorder.calls == []
