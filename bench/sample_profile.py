"""Where a PostgreSQL turn's client CPU goes, by sampling: py-spy over ``profile_turns.py``.

    .venv/bin/pip install -e '.[bench]'       # py-spy
    .venv/bin/python bench/sample_profile.py [--turns 6000] [--clients 8] [--effects 0|1]
        [--rate 1000] [--top 20] [--out FILE]

Runs ``bench/profile_turns.py --store postgres`` under ``py-spy record`` (a sampling profiler:
it does not slow Python calls down, unlike ``cProfile``, so small frequent functions are not
overstated) and sorts each sample, taken while the event loop ran a callback, by its innermost
frame: asyncio and sockets, models and codec (pydantic, the codec, ids), the store's own lines,
asyncpg, the benchmark's operation, other standard library. Prints those shares and the top
innermost frames, and writes ``bench/results/sample_profile.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "sample_profile.json"

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("asyncpg (driver)", ("asyncpg",)),
    ("asyncio and sockets", ("asyncio/", "selectors.py", "socket.py")),
    ("models, codec, ids", ("pydantic", "codec.py", "_documents.py", "json/", "ids.py")),
    ("the benchmark's operation", ("_payloads.py", "profile_turns.py")),
    ("the store's own lines", ("intention_kernel",)),
)


def category(leaf: str) -> str:
    """The category of a sample by its innermost frame (``name (file:line)``)."""
    where = leaf.split(" (", 1)[1] if " (" in leaf else leaf
    for name, marks in CATEGORIES:
        if any(mark in where for mark in marks):
            return name
    return "other standard library"


def tally(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """Samples per category and per innermost frame, from py-spy's raw (collapsed) output,
    counting only the samples taken while the event loop ran a callback."""
    kinds: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        if not any(part.startswith("Handle._run ") for part in parts):
            continue  # start-up, imports, the loop's own wait
        n = int(count)
        total += n
        kinds[category(parts[-1])] += n
        frames[parts[-1]] += n
    return kinds, frames, total


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=6000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--effects", type=int, choices=(0, 1), default=0)
    parser.add_argument("--rate", type=int, default=1000, help="samples per second")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -e '.[bench]'")
    with tempfile.TemporaryDirectory() as tmp:
        raw_path = Path(tmp) / "samples.txt"
        command = [spy, "record", "-r", str(args.rate), "--format", "raw", "-o", str(raw_path)]
        command += ["--", sys.executable, str(ROOT / "profile_turns.py"), "--store", "postgres"]
        command += ["--turns", str(args.turns), "--clients", str(args.clients)]
        command += ["--effects", str(args.effects)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        kinds, frames, total = tally(raw_path.read_text())
    if total == 0:
        raise SystemExit("no samples taken while the event loop ran")
    print(f"{total} samples while the event loop ran a callback ({args.rate}/s)")
    for name, n in kinds.most_common():
        print(f"{n / total:7.1%}  {name}")
    print("top innermost frames:")
    for frame, n in frames.most_common(args.top):
        print(f"{n / total:7.1%}  {frame}")
    report = {
        "benchmark": "sample_profile",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "samples": total,
        "share_by_innermost_frame": {k: round(n / total, 4) for k, n in kinds.most_common()},
        "top_frames": {f: round(n / total, 4) for f, n in frames.most_common(args.top)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
