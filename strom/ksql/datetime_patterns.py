"""Java's ``DateTimeFormatter`` patterns (what ksqlDB's date and time functions take)
formatting and parsing Python datetimes.

Owns the pattern letters users write in practice: ``y``/``u`` year (``yy`` two
digits), ``M``/``L`` month (``MMM`` and ``MMMM`` as English names), ``d`` day, ``D``
day of year, ``H``/``k``/``h``/``K`` hours, ``m`` minutes, ``s`` seconds, ``S``
fraction, ``n`` nanos, ``a`` AM/PM, ``E`` day name, ``e`` day number, ``w`` not, ``Z``,
``X``, ``x`` and ``O`` offsets, ``VV`` and ``z`` zone names, ``'...'`` literals and
``[...]`` optional sections (formatted always, parsed when present). A letter outside
these raises ``ValueError`` with Java's message (``Unknown pattern letter: b``).

Does not own which zone a function uses (its caller's) or ksqlDB's fixed TIMESTAMP text.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from dataclasses import dataclass
from functools import lru_cache

_MONTHS = ("January February March April May June July August September October November "
           "December").split()  # fmt: skip
_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_LETTERS = set("yuMLdDHkhKmsSnaEewZXxOVzG")


@dataclass(frozen=True)
class _Field:
    letter: str
    count: int


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Optional:
    parts: tuple[_Field | _Text | _Optional, ...]


_Part = _Field | _Text | _Optional


@lru_cache(maxsize=256)
def _tokens(pattern: str) -> tuple[_Part, ...]:
    stack: list[list[_Part]] = [[]]
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "'":
            end = index + 1
            literal = ""
            while True:
                close = pattern.find("'", end)
                if close < 0:
                    raise ValueError(f"Pattern ends with an incomplete string literal: {pattern}")
                literal += pattern[end:close]
                if pattern[close + 1 : close + 2] == "'":
                    literal += "'"
                    end = close + 2
                    continue
                break
            stack[-1].append(_Text(literal if close > index + 1 else "'"))
            index = close + 1
        elif char == "[":
            stack.append([])
            index += 1
        elif char == "]":
            if len(stack) == 1:
                raise ValueError(f"Pattern invalid as it contains ] without previous [: {pattern}")
            inner = stack.pop()
            stack[-1].append(_Optional(tuple(inner)))
            index += 1
        elif char.isalpha():
            if char not in _LETTERS:
                raise ValueError(f"Unknown pattern letter: {char}")
            end = index
            while end < len(pattern) and pattern[end] == char:
                end += 1
            stack[-1].append(_Field(char, end - index))
            index = end
        else:
            stack[-1].append(_Text(char))
            index += 1
    while len(stack) > 1:
        inner = stack.pop()
        stack[-1].append(_Optional(tuple(inner)))
    return tuple(stack[0])


# ---- formatting -----------------------------------------------------------------------


def _offset_text(moment: datetime.datetime, letter: str, count: int) -> str:
    offset = moment.utcoffset() or datetime.timedelta(0)
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, minutes = divmod(abs(seconds) // 60, 60)
    if letter in "Xx" and seconds == 0 and letter == "X":
        return "Z"
    if letter == "O":
        return (
            "GMT" if seconds == 0 else f"GMT{sign}{hours}" + (f":{minutes:02d}" if minutes else "")
        )
    if letter == "Z":
        if count == 4:
            return "GMT" if seconds == 0 else f"GMT{sign}{hours:02d}:{minutes:02d}"
        if count == 5:
            return "Z" if seconds == 0 else f"{sign}{hours:02d}:{minutes:02d}"
        return f"{sign}{hours:02d}{minutes:02d}"
    if count == 1:
        return f"{sign}{hours:02d}" + (f"{minutes:02d}" if minutes else "")
    if count in (2, 4):
        return f"{sign}{hours:02d}{minutes:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}"


def _format_field(moment: datetime.datetime, field: _Field) -> str:
    letter, count = field.letter, field.count
    if letter in "yu":
        if count == 2:
            return f"{moment.year % 100:02d}"
        return f"{moment.year:0{count}d}"
    if letter in "ML":
        if count >= 4:
            return _MONTHS[moment.month - 1]
        if count == 3:
            return _MONTHS[moment.month - 1][:3]
        return f"{moment.month:0{count}d}"
    if letter == "d":
        return f"{moment.day:0{count}d}"
    if letter == "D":
        return f"{moment.timetuple().tm_yday:0{count}d}"
    if letter == "H":
        return f"{moment.hour:0{count}d}"
    if letter == "k":
        return f"{moment.hour or 24:0{count}d}"
    if letter == "h":
        return f"{(moment.hour % 12) or 12:0{count}d}"
    if letter == "K":
        return f"{moment.hour % 12:0{count}d}"
    if letter == "m":
        return f"{moment.minute:0{count}d}"
    if letter == "s":
        return f"{moment.second:0{count}d}"
    if letter == "S":
        return f"{moment.microsecond:06d}000"[:count].ljust(count, "0")
    if letter == "n":
        return str(moment.microsecond * 1000)
    if letter == "a":
        return "AM" if moment.hour < 12 else "PM"
    if letter == "E":
        name = _DAYS[moment.weekday()]
        return name if count >= 4 else name[:3]
    if letter == "e":
        return str((moment.weekday() + 1) % 7 + 1)
    if letter == "G":
        return "AD"
    if letter in "VzO" and letter != "O":
        zone = moment.tzinfo
        if letter == "V" or count >= 4:
            return str(getattr(zone, "key", None) or moment.tzname() or "Z")
        return moment.tzname() or "Z"
    return _offset_text(moment, letter, count)


def _format_parts(moment: datetime.datetime, parts: tuple[_Part, ...]) -> str:
    out = []
    for part in parts:
        if isinstance(part, _Text):
            out.append(part.text)
        elif isinstance(part, _Optional):
            out.append(_format_parts(moment, part.parts))
        else:
            out.append(_format_field(moment, part))
    return "".join(out)


def format_datetime(moment: datetime.datetime, pattern: str) -> str:
    """``moment`` (aware) written with the Java ``pattern``."""
    return _format_parts(moment, _tokens(pattern))


# ---- parsing --------------------------------------------------------------------------


def _field_regex(field: _Field, name: str) -> str:
    letter, count = field.letter, field.count
    if letter in "ML" and count >= 3:
        names = "|".join(m if count >= 4 else m[:3] for m in _MONTHS)
        return f"(?P<{name}>{names})"
    if letter == "E":
        names = "|".join(d if count >= 4 else d[:3] for d in _DAYS)
        return f"(?P<{name}>{names})"
    if letter == "a":
        return f"(?P<{name}>AM|PM|am|pm)"
    if letter == "G":
        return f"(?P<{name}>AD|BC)"
    if letter in "XxZO":
        offset = r"[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?"
        return f"(?P<{name}>Z|(?:GMT|UTC){offset}|GMT|UTC|{offset})"
    if letter in "Vz":
        return f"(?P<{name}>[A-Za-z_][A-Za-z0-9_/+-]*)"
    if letter in "yu" and count != 2:
        return f"(?P<{name}>[+-]?\\d{{{max(count, 1)},9}})"
    if letter == "S":
        return f"(?P<{name}>\\d{{{count}}})"
    if letter == "n":
        return f"(?P<{name}>\\d{{1,9}})"
    if count == 1:
        return f"(?P<{name}>\\d{{1,3}})" if letter == "D" else f"(?P<{name}>\\d{{1,2}})"
    return f"(?P<{name}>\\d{{{count}}})"


def _regex_parts(parts: tuple[_Part, ...], fields: list[_Field]) -> str:
    out = []
    for part in parts:
        if isinstance(part, _Text):
            out.append(re.escape(part.text))
        elif isinstance(part, _Optional):
            out.append(f"(?:{_regex_parts(part.parts, fields)})?")
        else:
            out.append(_field_regex(part, f"f{len(fields)}"))
            fields.append(part)
    return "".join(out)


@lru_cache(maxsize=256)
def _parser(pattern: str) -> tuple[re.Pattern[str], tuple[_Field, ...]]:
    fields: list[_Field] = []
    regex = _regex_parts(_tokens(pattern), fields)
    return re.compile(regex, re.IGNORECASE), tuple(fields)


# Zone names a text may carry (a pattern's ``z``) that Java reads as a region, with its
# daylight time: ``PST`` in May is -07:00, as Java's parser takes it.
_ZONE_NAMES = {
    "PST": "America/Los_Angeles", "PDT": "America/Los_Angeles",
    "MST": "America/Denver", "MDT": "America/Denver",
    "CST": "America/Chicago", "CDT": "America/Chicago",
    "EST": "America/New_York", "EDT": "America/New_York",
    "AKST": "America/Anchorage", "AKDT": "America/Anchorage",
    "HST": "Pacific/Honolulu", "BST": "Europe/London", "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo", "CEST": "CET",
}  # fmt: skip


def _zone_from_text(text: str) -> datetime.tzinfo:
    if text.upper() in ("Z", "GMT", "UTC"):
        return datetime.UTC
    if text.upper() in _ZONE_NAMES:
        return zone(_ZONE_NAMES[text.upper()])
    match = re.fullmatch(r"(?:GMT|UTC)?([+-])(\d{1,2}):?(\d{2})?:?(\d{2})?", text)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = datetime.timedelta(
            hours=int(match.group(2)),
            minutes=int(match.group(3) or 0),
            seconds=int(match.group(4) or 0),
        )
        return datetime.timezone(sign * delta)
    return zone(text)


def parse_datetime(
    text: str, pattern: str, default_zone: datetime.tzinfo, *, prefix: bool = False
) -> tuple[datetime.datetime, bool, bool]:
    """``text`` read with the Java ``pattern``: the moment (in the zone the text names,
    else ``default_zone``), whether a date was present and whether a time was. With
    ``prefix`` the text may go on after what the pattern reads (as Java's
    ``SimpleDateFormat.parse`` allows)."""
    regex, fields = _parser(pattern)
    match = regex.match(text) if prefix else regex.fullmatch(text)
    if match is None:
        raise ValueError(f"Text '{text}' could not be parsed at index 0")
    year, month, day, day_of_year = 1970, 1, 1, None
    hour, minute, second, micro, pm = 0, 0, 0, 0, None
    tz: datetime.tzinfo | None = None
    has_date = has_time = False
    for index, field in enumerate(fields):
        value = match.group(f"f{index}")
        if value is None:
            continue
        letter = field.letter
        if letter in "yu":
            has_date = True
            year = int(value) + (2000 if field.count == 2 else 0)
        elif letter in "ML":
            has_date = True
            if value.isdigit():
                month = int(value)
            else:
                month = [m[: len(value)].lower() for m in _MONTHS].index(value.lower()) + 1
        elif letter == "d":
            has_date = True
            day = int(value)
        elif letter == "D":
            has_date = True
            day_of_year = int(value)
        elif letter in "Hk":
            has_time = True
            hour = int(value) % 24
        elif letter in "hK":
            has_time = True
            hour = int(value) % 12
        elif letter == "m":
            has_time = True
            minute = int(value)
        elif letter == "s":
            has_time = True
            second = int(value)
        elif letter == "S":
            micro = int(value.ljust(6, "0")[:6])
        elif letter == "n":
            micro = int(value) // 1000
        elif letter == "a":
            pm = value.upper() == "PM"
        elif letter in "XxZOVz":
            tz = _zone_from_text(value)
    if pm is not None:
        hour = hour % 12 + (12 if pm else 0)
    if day_of_year is not None:
        base = datetime.datetime(year, 1, 1) + datetime.timedelta(days=day_of_year - 1)
        month, day = base.month, base.day
    naive = datetime.datetime(year, month, day, hour, minute, second, micro)
    zone_info = tz if tz is not None else default_zone
    return naive.replace(tzinfo=zone_info), has_date, has_time


@lru_cache(maxsize=128)
def zone(name: str) -> datetime.tzinfo:
    """A zone by Java's names: region ids, ``UTC``, ``Z``, ``+02:00``, ``GMT+2``."""
    text = name.strip()
    if text.upper() in ("Z", "UTC", "GMT", "UT"):
        return datetime.UTC
    match = re.fullmatch(r"(?:GMT|UTC|UT)?([+-])(\d{1,2})(?::?(\d{2}))?", text)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = datetime.timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0))
        return datetime.timezone(sign * delta)
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"Unknown time-zone ID: {name}") from None
