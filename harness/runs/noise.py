"""How far a trial's step time moves by itself: the band a difference must clear to count.

A trial times at least MIN_TIMED_STEPS steps. Its spread is the median absolute deviation of
those steps, scaled by 1.4826 so that it estimates a standard deviation where steps are normal:
one step at three times the others, or a stall, moves it little, where the range of three steps
(the suite's first estimate) let one bad step widen the band to any size. The spread is capped at
CAP of the median step, stated here before any run, so that no trial is ever noisy enough to hide
a difference of more than twice that between two techniques: a comparison counts a difference
only beyond the spreads of both sides summed.

One experiment measured several times (an emulated VM alone, once per slice of the run, every
technique) also shows how far the machine drifts between the repeats: that drift reaches every
trial of the run alike, so each is judged against at least the median relative spread of them all
(shared_floor; harness.paper.claims.drift), still capped.
"""
import statistics

MIN_TIMED_STEPS = 5
CAP = 0.10  # of the median step time
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation over its median absolute deviation


def spread(times: list[float]) -> float:
    """The robust spread of step times (seconds), at most CAP of their median; 0 for one step."""
    if len(times) < 2:
        return 0.0
    median = statistics.median(times)
    mad = statistics.median(abs(t - median) for t in times)
    return min(MAD_TO_SIGMA * mad, CAP * median)


def relative(times: list[float]) -> float:
    """spread() as a share of the median step."""
    return spread(times) / statistics.median(times)


def shared_floor(shares: list[float]) -> float:
    """The floor of every technique's relative spread in one experiment repeated on one machine:
    the median of their own, so that one technique's steady repeats do not make it look surer
    than the machine was."""
    return min(statistics.median(shares), CAP) if shares else 0.0
