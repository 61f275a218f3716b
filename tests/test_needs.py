"""``scripts/needs`` (run first by ``scripts/test``) says up front what the suite cannot find,
the pgbouncer binary included, and never stops the run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_needs(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """``scripts/needs`` with a PATH of only ``bin_dir`` (bash and id linked into it)."""
    for tool in ("bash", "id"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return subprocess.run(
        [str(ROOT / "scripts" / "needs")],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_missing_pgbouncer_is_announced(tmp_path: Path) -> None:
    done = run_needs(tmp_path)
    assert done.returncode == 0
    assert "note: pgbouncer is not installed" in done.stderr
    assert "test_postgres_pgbouncer.py is skipped" in done.stderr


def test_an_installed_pgbouncer_is_not(tmp_path: Path) -> None:
    binary = tmp_path / "pgbouncer"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    done = run_needs(tmp_path)
    assert done.returncode == 0
    assert "pgbouncer" not in done.stderr
