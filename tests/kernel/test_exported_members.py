from __future__ import annotations

import intention_kernel
import intention_kernel.kernel as kernel
import intention_kernel.testing as testing


def test_kernel_all_is_sorted_and_complete() -> None:
    assert kernel.__all__ == sorted(kernel.__all__)
    for name in kernel.__all__:
        assert hasattr(kernel, name), name
    for name in ("Kernel", "define_agent", "define_capability", "TurnResult", "Completed"):
        assert name in intention_kernel.__all__
        assert getattr(intention_kernel, name) is getattr(kernel, name)


def test_testing_helpers_are_public() -> None:
    assert {"ScriptedModelGateway", "EventCollector", "MemoryDurability"} <= set(testing.__all__)
