"""Operator logic shared by the command line and the web inspector.

Why a module of its own: ``thread diagnose`` and ``check-compat`` must say the same thing in a
terminal and in a browser; both render what these functions return and add no reasoning.
"""

from __future__ import annotations

from ._age import age
from ._history import answer_line, turn_answer, turn_input
from .compat_report import CompatReport, RefusedThread, compat_report
from .diagnosis import Diagnosis, Finding, diagnose_thread, redact

__all__ = [
    "CompatReport",
    "Diagnosis",
    "Finding",
    "RefusedThread",
    "age",
    "answer_line",
    "compat_report",
    "diagnose_thread",
    "redact",
    "turn_answer",
    "turn_input",
]
