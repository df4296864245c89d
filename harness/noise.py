"""How far a trial's step time moves by itself: the band a difference must clear to count.

A trial times at least MIN_TIMED_STEPS steps. Its spread is the median absolute deviation of
those steps, scaled by 1.4826 so that it estimates a standard deviation where steps are normal:
one step at three times the others, or a stall, moves it little, where the range of three steps
(the suite's first estimate) let one bad step widen the band to any size. The spread is capped at
CAP of the median step, stated here before any run, so that no trial is ever noisy enough to hide
a difference of more than twice that between two techniques: a comparison counts a difference
only beyond the spreads of both sides summed.
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
