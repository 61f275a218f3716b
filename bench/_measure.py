"""The pure parts of the turn benchmarks' measurements: ``/proc`` parsing, CPU time, machine
load and per-turn figures. Used by ``postgres_turns``, ``sqlite_turns`` and ``peers``.

- CPU of a process: ``utime + stime`` (and ``cutime + cstime``, children that exited and were
  reaped) from ``/proc/<pid>/stat``, in clock ticks; ``cpu_seconds`` converts.
- Machine load: ``/proc/loadavg`` (1, 5 and 15 minute averages, runnable and total tasks) and
  the core count, recorded before and after every cell. A cell that starts with a 1-minute
  load above the core count ran on a machine already busy with other work: its figures are
  flagged (``overloaded``) and a warning is printed.
  The 1-minute average also carries the cells this run has just finished, so each cell also
  measures the CPU *others* used while it ran: the machine's busy time (``/proc/stat``) minus
  the CPU of the cell's own processes (client and server), as a share of all cores
  (``others_cpu_share``); above ``OTHERS_LIMIT`` a warning is printed.
- Per-turn figures: the difference of two readings divided by the turns the cell ran.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")
OTHERS_LIMIT = 0.25
"""Share of all cores other work may use during a cell before its figures are flagged."""
GSET = re.compile(r"(?:^|\s)\\[ag]set(?:\s+\w+)?$")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the benchmarks read (CPU in clock ticks)."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int

    @property
    def ticks(self) -> int:
        """CPU of the process itself (user + system)."""
        return self.utime + self.stime

    @property
    def reaped_ticks(self) -> int:
        """CPU of the children it has waited for."""
        return self.cutime + self.cstime


def parse_proc_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line. The command name (field 2) is in parentheses and
    may itself hold spaces and parentheses, so the fields after it are found from the last
    ``)``."""
    start, end = text.index("("), text.rindex(")")
    rest = text[end + 2 :].split()  # rest[0] is field 3 (state): field k is rest[k - 3]
    return ProcStat(
        pid=int(text[:start]),
        comm=text[start + 1 : end],
        state=rest[0],
        ppid=int(rest[1]),
        utime=int(rest[11]),
        stime=int(rest[12]),
        cutime=int(rest[13]),
        cstime=int(rest[14]),
    )


def read_proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or ``None`` when the process has gone."""
    try:
        return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds(ticks: int) -> float:
    return ticks / TICKS


def parse_loadavg(text: str) -> dict[str, Any]:
    """``/proc/loadavg``: ``"0.44 0.26 0.11 3/176 7788"``."""
    fields = text.split()
    running, total = fields[3].split("/")
    return {
        "loadavg": [round(float(f), 2) for f in fields[:3]],
        "runnable": int(running),
        "tasks": int(total),
    }


def machine() -> dict[str, Any]:
    """Cores and load, recorded before and after every cell and with every result file."""
    try:
        load = parse_loadavg(Path("/proc/loadavg").read_text())
    except (OSError, ValueError, IndexError):
        load = {"loadavg": [round(v, 2) for v in os.getloadavg()]}
    return {"cpus": os.cpu_count() or 1, **load}


def overloaded(load: Mapping[str, Any]) -> bool:
    """The 1-minute load above the core count: other work competed for the cores."""
    return float(load["loadavg"][0]) > int(load["cpus"])


def load_warning(label: str, load: Mapping[str, Any]) -> str | None:
    """The warning printed before a cell that starts on an overloaded machine."""
    if not overloaded(load):
        return None
    return (
        f"WARNING: {label}: 1-minute load {load['loadavg'][0]} > {load['cpus']} cores before"
        " the cell (the average includes the cells just run; see the share of the cores other"
        " work used during the cell)"
    )


def parse_cpu_line(text: str) -> tuple[int, int]:
    """Busy and total clock ticks of the whole machine from ``/proc/stat`` (its first line,
    ``cpu user nice system idle iowait irq softirq steal guest guest_nice``; guest time is
    already part of user time)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]] + [0] * (9 - len(fields))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait
    raise ValueError("no cpu line in /proc/stat")


def machine_cpu() -> tuple[int, int] | None:
    """``parse_cpu_line`` of this machine, or ``None`` without ``/proc``."""
    try:
        return parse_cpu_line(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None


def others_share(
    before: tuple[int, int] | None, after: tuple[int, int] | None, ours_seconds: float | None
) -> float | None:
    """The share of all cores used by other work between two ``machine_cpu`` readings: the
    machine's busy time minus ``ours_seconds`` (the CPU of the cell's client and server)."""
    if before is None or after is None or ours_seconds is None:
        return None
    total = after[1] - before[1]
    if total <= 0:
        return None
    busy = cpu_seconds(after[0] - before[0])
    return round(max(0.0, busy - ours_seconds) / cpu_seconds(total), 3)


def others_warning(label: str, share: float | None) -> str | None:
    """The warning printed after a cell during which other work took too much CPU."""
    if share is None or share <= OTHERS_LIMIT:
        return None
    return (
        f"WARNING: {label}: other work used {share:.0%} of the cores during the cell; its"
        " figures are not trustworthy"
    )


def cell_machine(
    before: Mapping[str, Any], after: Mapping[str, Any], others: float | None = None
) -> dict[str, Any]:
    """What a cell's result records about the machine: the load before and after, the share
    of the cores other work used during the cell, and ``overloaded`` when that share is above
    ``OTHERS_LIMIT`` (or, when it could not be measured, when the load before the cell was
    above the cores)."""
    above = overloaded(before)
    return {
        "before": dict(before),
        "after": dict(after),
        "load_above_cores": above,
        "others_cpu_share": others,
        "overloaded": above if others is None else others > OTHERS_LIMIT,
    }


def self_cpu() -> float:
    """CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    """CPU seconds of this process's children that have exited and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_turn(value: float | None, turns: int, digits: int = 3) -> float | None:
    """``value`` divided by ``turns`` (``None`` when unknown or no turn ran)."""
    if value is None or turns <= 0:
        return None
    return round(value / turns, digits)


def deltas(
    before: Mapping[str, float], after: Mapping[str, float], turns: int
) -> dict[str, float | None]:
    """``<key>_per_turn`` for every counter read in both snapshots."""
    return {f"{k}_per_turn": per_turn(after[k] - before[k], turns) for k in before if k in after}


def cpu_us_per_turn(seconds: float | None, turns: int) -> float | None:
    """CPU seconds of a cell as microseconds per turn."""
    return per_turn(None if seconds is None else seconds * 1e6, turns, 1)


def ratio(ours: float | None, other: float | None) -> float | None:
    if ours is None or other is None or other == 0:
        return None
    return round(ours / other, 3)


def script_statements(text: str) -> int:
    """SQL statements one run of a pgbench script sends. pgbench ends an SQL command at a
    ``;`` or at ``\\gset`` (on the same line or the next); a command may span lines;
    meta-commands (``\\set``) and comments are not sent."""
    count, open_statement = 0, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("--"):
            continue
        if line.startswith("\\"):
            if GSET.match(line) and open_statement:
                count, open_statement = count + 1, False
            continue
        open_statement = True
        if line.endswith(";") or GSET.search(line):
            count, open_statement = count + 1, False
    return count + (1 if open_statement else 0)


def table_cell(value: Any) -> str:
    """A figure as the printed tables show it: ``-`` when missing, whole above 100."""
    if value is None:
        return "-"
    if isinstance(value, float) and value >= 100:
        return f"{value:.0f}"
    return f"{value:g}"
