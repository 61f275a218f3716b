"""Time to render a consent question (``intention_kernel.kernel.consent``) by operation shape.

Every field the digest covers is listed, so rendering walks the whole input; an operation too
large to show is refused as soon as its list passes ``MAX_DETAILS``, without rendering the rest.
Shapes: a transfer with a 500-character memo; 50 flat fields; 60 nested order lines (elided to
the narrower widths); one million list items (refused).

Run:  .venv/bin/python bench/consent_questions.py
Writes bench/results/consent_questions.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from intention_kernel.kernel import consent

RESULTS = Path(__file__).parent / "results" / "consent_questions.json"

SHAPES: dict[str, dict[str, Any]] = {
    "transfer, 500-char memo": {"payee": "ACME Ltd", "memo": "x" * 500, "amount_eur": 9800},
    "50 flat fields": {f"field_{i}": f"value number {i}" for i in range(50)},
    "60 nested order lines": {
        "lines": [{"sku": f"SKU-{i:05d}-{'x' * 20}", "quantity": i} for i in range(60)]
    },
    "1,000,000 list items (refused)": {"xs": [0] * 1_000_000},
}


def _per_call(work: Callable[[], object], budget: float = 0.5) -> float:
    """Median seconds per call over repeated batches within ``budget`` seconds."""
    samples: list[float] = []
    deadline = time.perf_counter() + budget
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    rows = []
    for name, operation in SHAPES.items():
        asked = consent.question("Send it.", operation)
        seconds = _per_call(lambda op=operation: consent.question("Send it.", op))
        rows.append(
            {
                "shape": name,
                "asked": asked is not None,
                "question_chars": None if asked is None else len(asked),
                "microseconds": round(seconds * 1e6, 1),
            }
        )
    result = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "max_details": consent.MAX_DETAILS,
        "shapes": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
