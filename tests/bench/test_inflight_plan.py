"""The pure parts of ``bench/inflight.py`` (``bench/_inflight_plan.py``): the model-call
schedule every side runs, the effect mix, the zero-cost turn count and the memory figures."""

from __future__ import annotations

import statistics

from bench import _inflight_plan as plan


def test_model_waits_lie_in_one_to_three_seconds_and_repeat() -> None:
    waits = [plan.model_wait(slot, n) for slot in range(200) for n in range(1, 51)]
    assert all(plan.MIN_WAIT <= w < plan.MAX_WAIT for w in waits)
    assert waits == [plan.model_wait(slot, n) for slot in range(200) for n in range(1, 51)]
    assert abs(statistics.mean(waits) - plan.MEAN_WAIT) < 0.05
    below_two = sum(w < 2.0 for w in waits) / len(waits)
    assert 0.45 < below_two < 0.55
    assert len({round(w, 6) for w in waits}) > len(waits) * 0.99


def test_half_the_turns_carry_one_effect_and_half_of_those_in_flight() -> None:
    assert {plan.effects_of(s, n) for s in range(10) for n in range(10)} == {0, 1}
    assert sum(plan.effects_of(s, 1) for s in range(100)) == 50
    assert sum(plan.effects_of(3, n) for n in range(1, 101)) == 50


def test_ideal_turns_follow_the_schedule() -> None:
    assert plan.ideal_turns(10, 0.5) == 0  # no wait ends before a second
    one = plan.ideal_turns(1, 20.0)
    at, expected = 0.0, 0
    for n in range(1, 100):
        at += plan.model_wait(0, n)
        if at > 20.0:
            break
        expected += 1
    assert one == expected
    many = plan.ideal_turns(1000, 20.0)
    assert 1000 * (20.0 / plan.MEAN_WAIT - 1) < many <= 1000 * 20.0 / plan.MIN_WAIT
    assert plan.ideal_turns(1000, 20.0, cap=500) == 500


def test_percentile_is_nearest_rank() -> None:
    assert plan.percentile([], 0.5) is None
    assert plan.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert plan.percentile([float(x) for x in range(1, 101)], 0.99) == 99.0
    assert plan.percentile([5.0], 0.99) == 5.0


def test_resident_memory_and_per_turn_figures() -> None:
    assert plan.parse_statm("1000 250 30 4 0 200 0\n") == 250 * plan.PAGE
    assert plan.rss_bytes() > 0
    assert plan.per_in_flight(2 * 1024 * 1000, 1000) == 2.0
    assert plan.per_in_flight(-4096, 10) == 0.0
    assert plan.per_in_flight(None, 10) is None
    assert plan.per_in_flight(1024, 0) is None
