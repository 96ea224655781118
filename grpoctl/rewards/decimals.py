"""When a decimal answers an exact value: the numeric tolerance, in one place.

A prediction written as a plain decimal (`0.333333`, `-3.141593`) is right for an
exact truth (`\\frac{1}{3}`, `-\\pi`) when it is

- exactly the truth's value (`0.75` for `\\frac{3}{4}`), or
- the truth's value correctly rounded to the decimal places it writes, with at
  least MIN_SIGNIFICANT_DIGITS significant digits: every digit written is right,
  and there are enough of them that a guess cannot land there.

So `0.333333` and `3.141593` (or `3.14159`) are right; `0.33`, `3.14`, `0.3333334`
(a wrong 7th digit) and `0.666666` (truncated, not rounded) are wrong. The test
is scale-free: `0.000000333333` is right for `\\frac{1}{3000000}` and `0.0` is not.
(math-verify's own rule, both sides rounded to 6 decimal places, would accept
`0.0` there, and `0.3333334` for a third.)

When the truth is itself a decimal, or an integer, the prediction must equal it
exactly: then the problem has already said how to round. A prediction with no
decimal point is an exact claim and is never read as a rounding.
"""

from __future__ import annotations

import re
from fractions import Fraction

MIN_SIGNIFICANT_DIGITS = 6
# More places than this is not a rounding anybody writes, and would need more
# precision than the truth is evaluated with (equivalence.py).
MAX_DECIMAL_PLACES = 30

_DECIMAL_WITH_POINT = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")


def is_decimal(text: str) -> bool:
    """A plain decimal numeral with a decimal point: `0.5`, `-.25`, `3.`."""
    return _DECIMAL_WITH_POINT.match(text) is not None


def significant_digits(decimal: str) -> int:
    """Digits from the first non-zero one on, trailing zeros included:
    `0.003330` has 4."""
    return len(decimal.lstrip("+-").replace(".", "").lstrip("0"))


def stands_for(decimal: str, value: Fraction) -> bool:
    """Whether a plain decimal numeral answers an exact value (see the module doc).

    value must be exact, or accurate far beyond MAX_DECIMAL_PLACES.
    """
    if not is_decimal(decimal):
        raise ValueError(f"not a plain decimal: {decimal!r}")
    written = Fraction(decimal)
    if written == value:
        return True
    places = len(decimal.partition(".")[2])
    if places > MAX_DECIMAL_PLACES or significant_digits(decimal) < MIN_SIGNIFICANT_DIGITS:
        return False
    # Correctly rounded: within half a unit of the last place written. A value
    # exactly halfway (only a terminating one can be) accepts either neighbour.
    return abs(written - value) <= Fraction(1, 2 * 10**places)
