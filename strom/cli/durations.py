"""ISO-8601 durations as Kafka's tools take them (``PnDTnHnMn.nS``, java.time.Duration's form).

Owns parsing ``P1D``, ``PT6H``, ``P1DT2H30M``, ``PT0.5S`` into milliseconds for
``strom groups --reset-offsets --by-duration``. Days are the largest unit (24 hours),
as in java.time.Duration; years, months and weeks are refused, so are negative
durations (a reset into the future means nothing). Letters may be lower case.
"""

from __future__ import annotations

import re
from decimal import Decimal

_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE,
)
_MS = {"days": 86_400_000, "hours": 3_600_000, "minutes": 60_000}


def parse_duration_ms(text: str) -> int:
    """Milliseconds in an ISO-8601 duration; ValueError naming the expected form."""
    stripped = text.strip()
    match = _DURATION.fullmatch(stripped)
    if match is None or not any(match.groupdict().values()) or stripped.upper().endswith("T"):
        raise ValueError(
            f"{text!r} is not an ISO-8601 duration PnDTnHnMnS (e.g. P1D, PT6H, P1DT2H30M, PT90S)"
        )
    total = sum(int(match[name] or 0) * ms for name, ms in _MS.items())
    seconds = match["seconds"]
    if seconds:
        total += int(Decimal(seconds.replace(",", ".")) * 1000)
    return total
