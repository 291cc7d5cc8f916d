"""Java's ``SimpleDateFormat`` patterns, as Kafka's TimestampConverter and TimestampRouter
take them (``yyyyMMdd``, ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX``), always in UTC as Kafka sets
them: formatting milliseconds since the epoch, and parsing text back.

Letters served: ``y`` (``yy`` two digits; ``Y``, Java's week year, is read as the year,
which differs only in the days of a week that spans two years), ``M`` (number;
``MMM`` / ``MMMM`` names),
``d``, ``D`` (day of year), ``H``, ``k``, ``K``, ``h``, ``m``, ``s``, ``S`` (milliseconds),
``a``, ``E`` (day names), ``z``, ``Z``, ``X``; text in single quotes, ``''`` a quote.
Another letter is Java's ``Illegal pattern character`` error (a ``ValueError``).

Does not own which field holds a timestamp (``casts``, ``routing``).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MS_PER_DAY = 86_400_000
_LETTERS = set("yYMdDHkKhmsSaEzZX")
_NUMERIC = set("yYMdDHkKhmsS")


@dataclass(frozen=True)
class _Token:
    letter: str  # "" for literal text
    count: int = 0
    text: str = ""


def _tokens(pattern: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            end = i + 1
            text = ""
            while end < len(pattern):
                if pattern[end] == "'":
                    if end + 1 < len(pattern) and pattern[end + 1] == "'":
                        text += "'"
                        end += 2
                        continue
                    break
                text += pattern[end]
                end += 1
            else:
                raise ValueError(f"Unterminated quote in pattern {pattern}")
            tokens.append(_Token("", text=text or "'"))
            i = end + 1
        elif char.isascii() and char.isalpha():
            if char not in _LETTERS:
                raise ValueError(f"Illegal pattern character '{char}'")
            end = i
            while end < len(pattern) and pattern[end] == char:
                end += 1
            tokens.append(_Token(char, end - i))
            i = end
        else:
            tokens.append(_Token("", text=char))
            i += 1
    return tokens


class JavaDateFormat:
    """One SimpleDateFormat pattern in UTC: ``format(ms)`` and ``parse(text)`` (ms)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.tokens = _tokens(pattern)
        self._regex = re.compile(self._parse_regex(), re.IGNORECASE)

    def format(self, epoch_ms: int) -> str:
        moment = EPOCH + timedelta(milliseconds=epoch_ms)
        return "".join(self._format_token(token, moment) for token in self.tokens)

    @staticmethod
    def _format_token(token: _Token, moment: datetime) -> str:
        letter, count = token.letter, token.count
        if not letter:
            return token.text
        if letter in "yY":
            return f"{moment.year % 100:02d}" if count == 2 else f"{moment.year:0{count}d}"
        if letter == "M":
            if count >= 4:
                return calendar.month_name[moment.month]
            if count == 3:
                return calendar.month_abbr[moment.month]
            return f"{moment.month:0{count}d}"
        if letter == "E":
            names = calendar.day_name if count >= 4 else calendar.day_abbr
            return names[moment.weekday()]
        if letter == "a":
            return "AM" if moment.hour < 12 else "PM"
        if letter == "z":
            return "Coordinated Universal Time" if count >= 4 else "UTC"
        if letter == "Z":
            return "+0000"
        if letter == "X":
            return "Z"
        numbers = {
            "d": moment.day,
            "D": moment.timetuple().tm_yday,
            "H": moment.hour,
            "k": moment.hour or 24,
            "K": moment.hour % 12,
            "h": moment.hour % 12 or 12,
            "m": moment.minute,
            "s": moment.second,
            "S": moment.microsecond // 1000,
        }
        return f"{numbers[letter]:0{count}d}"

    def _parse_regex(self) -> str:
        parts: list[str] = []
        for index, token in enumerate(self.tokens):
            letter, count = token.letter, token.count
            following = self.tokens[index + 1] if index + 1 < len(self.tokens) else None
            adjacent = following is not None and following.letter in _NUMERIC
            if not letter:
                parts.append(re.escape(token.text))
            elif letter == "M" and count >= 3:
                parts.append(r"(?P<month_name>[A-Za-z]+)")
            elif letter in _NUMERIC:
                digits = rf"\d{{{count}}}" if adjacent else r"\d+"
                group = f"{letter}{index}"
                parts.append(f"(?P<{group}>{digits})")
            elif letter == "E":
                parts.append(r"[A-Za-z]+")
            elif letter == "a":
                parts.append(r"(?P<ampm>AM|PM)")
            else:  # z, Z, X: the zone
                parts.append(r"(?P<zone>Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)")
        return "".join(parts)

    def parse(self, text: str) -> int:
        """Milliseconds since the epoch of ``text``; ValueError when it does not match."""
        match = self._regex.fullmatch(text)
        if match is None:
            raise ValueError(f'Unparseable date: "{text}"')
        fields = {"y": 1970, "M": 1, "d": 1, "H": 0, "m": 0, "s": 0, "S": 0}
        day_of_year: int | None = None
        twelve_hour: int | None = None
        for index, token in enumerate(self.tokens):
            group = f"{token.letter}{index}"
            if token.letter in _NUMERIC and group in match.groupdict():
                number = int(match.group(group))
                letter = "y" if token.letter == "Y" else token.letter
                if letter == "y" and token.count == 2:
                    number += 2000 if number < 80 else 1900
                if letter in ("h", "K"):
                    twelve_hour = number % 12
                elif letter == "k":
                    fields["H"] = number % 24
                elif letter == "D":
                    day_of_year = number
                else:
                    fields[letter] = number
        if match.groupdict().get("month_name"):
            names = [n.lower() for n in calendar.month_name]
            abbreviations = [n.lower() for n in calendar.month_abbr]
            name = match.group("month_name").lower()
            if name in names:
                fields["M"] = names.index(name)
            elif name in abbreviations:
                fields["M"] = abbreviations.index(name)
            else:
                raise ValueError(f'Unparseable date: "{text}"')
        if twelve_hour is not None:
            pm = (match.groupdict().get("ampm") or "AM").upper() == "PM"
            fields["H"] = twelve_hour + (12 if pm else 0)
        moment = datetime(fields["y"], 1, 1, tzinfo=UTC)
        if day_of_year is not None:
            moment += timedelta(days=day_of_year - 1)
        else:
            moment = moment.replace(month=fields["M"], day=fields["d"])
        moment += timedelta(
            hours=fields["H"], minutes=fields["m"], seconds=fields["s"], milliseconds=fields["S"]
        )
        moment -= _offset(match.groupdict().get("zone"))
        return (moment - EPOCH) // timedelta(milliseconds=1)


def _offset(zone: str | None) -> timedelta:
    if zone is None or zone.upper() in ("Z", "UTC", "GMT"):
        return timedelta()
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    return sign * timedelta(hours=hours, minutes=minutes)


def epoch_ms(moment: datetime) -> int:
    """A datetime (naive ones read as UTC) in milliseconds since the epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)
