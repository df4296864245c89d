"""How a figure prints beside the number a verdict compared it with (a threshold, a bound): in as
few significant digits as the report uses elsewhere, and as many more as it takes to leave it on
its own side. A figure a hair under its threshold, or a gap a hair past its bound, must not print
as the very number it missed, or the reader sees "2x (it shows at 2x or more)" beside a limit
that did not show.
"""


def apart(value: float, other: float, digits: int = 3) -> str:
    """value in the fewest significant digits, at least `digits`, that leave it on its own side of
    `other` (equal only where it is equal)."""
    for d in range(digits, 18):
        text = f"{value:.{d}g}"
        if (float(text) > other, float(text) < other) == (value > other, value < other):
            return text
    return repr(value)


def times(value: float, other: float | None = None) -> str:
    """A factor ("1.98x"), apart from `other` where it was compared with one."""
    return (f"{value:.3g}" if other is None else apart(value, other)) + "x"
