"""Pipeshard's lockstep 1F1B schedule (harness.techniques.pipeshard.one_f_one_b): the order the
timed step runs and the exchanges its cost prices, checked as a schedule, without compiling it."""
from hypothesis import given
from hypothesis import strategies as st

from harness.techniques.pipeshard import exchanges, one_f_one_b

stages_and_microbatches = dict(n=st.integers(2, 6), m=st.integers(1, 8))


def when(ticks, which: str, stage: int) -> dict[int, int]:
    """Microbatch -> the tick at which `stage` runs it forward or backward."""
    return {getattr(t, which)[stage]: i for i, t in enumerate(ticks) if getattr(t, which)[stage] is not None}


@given(**stages_and_microbatches)
def test_every_stage_runs_every_microbatch_forward_then_back_once_in_dependency_order(n, m):
    ticks = one_f_one_b(n, m)
    for s in range(n):
        fwd, bwd = when(ticks, "forward", s), when(ticks, "backward", s)
        assert sorted(fwd) == sorted(bwd) == list(range(m))  # once each, no microbatch left out
        for i in range(m):
            assert bwd[i] >= fwd[i] + (0 if s == n - 1 else 1)  # only the last stage turns in one tick
            if s > 0:  # activations arrive one exchange after the stage before ran them
                assert fwd[i] == when(ticks, "forward", s - 1)[i] + 1
            if s < n - 1:  # gradients arrive one exchange after the stage after took them back
                assert bwd[i] == when(ticks, "backward", s + 1)[i] + 1


@given(**stages_and_microbatches)
def test_a_tick_sends_exactly_where_a_stage_waits_for_it(n, m):
    ticks = one_f_one_b(n, m)
    for i, t in enumerate(ticks):
        nxt = ticks[i + 1] if i + 1 < len(ticks) else None
        needed_on = nxt is not None and any(f is not None for f in nxt.forward[1:])
        needed_back = nxt is not None and any(b is not None for b in nxt.backward[:-1])
        assert t.sends_forward == needed_on and t.sends_back == needed_back


@given(**stages_and_microbatches)
def test_1f1b_keeps_gpipes_ticks_and_never_exchanges_more(n, m):
    """Both schedules take m + n - 1 ticks of a forward and a backward; 1F1B crosses the link in
    fewer exchanges on two stages (each a swap) and in as many on more."""
    ticks = one_f_one_b(n, m)
    busy = sum(max((f is not None) + (b is not None) for f, b in zip(t.forward, t.backward)) for t in ticks)
    assert len(ticks) == m + 2 * n - 2 and busy >= 2 * m
    if n == 2:
        assert exchanges("1f1b", n, m) == m + 1 <= exchanges("gpipe", n, m)
    else:
        assert exchanges("1f1b", n, m) == exchanges("gpipe", n, m)


def test_on_one_stage_nothing_is_exchanged():
    assert exchanges("1f1b", 1, 4) == exchanges("gpipe", 1, 4) == 0
