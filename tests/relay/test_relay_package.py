"""The relay package surface: exports, lazy drivers, install hints."""

from __future__ import annotations

import subprocess
import sys

import intention_kernel.relay as relay


def test_relay_all_is_sorted_unique_and_complete() -> None:
    names = relay.__all__
    assert len(names) == len(set(names))
    assert sorted(names, key=lambda n: (not n.isupper(), n)) == names
    for name in names:
        assert hasattr(relay, name)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_the_relay_loads_no_broker_driver() -> None:
    result = _python(
        "import sys, intention_kernel, intention_kernel.relay\n"
        "from intention_kernel.relay import open_sink\n"
        "import intention_kernel.cli._outbox\n"
        "open_sink('stdout://')\n"
        "drivers = ('nats', 'redis', 'httpx', 'intention_kernel.durability.sqlite')\n"
        "loaded = [m for m in drivers if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    assert result.returncode == 0, result.stderr


def test_a_missing_extra_gives_an_install_hint() -> None:
    result = _python(
        "import sys\n"
        "sys.modules['nats'] = None\n"
        "from intention_kernel.contracts import ConfigurationError\n"
        "from intention_kernel.relay import open_sink\n"
        "try:\n"
        "    open_sink('nats://127.0.0.1:4222/a?stream=A')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'intention-kernel[nats]'" in result.stdout
