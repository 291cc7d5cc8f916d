"""Format strings for ``strom consume -f``: one record as bytes, in the shape rpk takes.

Owns compiling a format such as ``'%t/%p@%o %k=%v\\n'`` once into the pieces that
render each record. Directives: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k``
key, ``%v`` value, ``%T`` timestamp (ms), ``%h`` headers (``k:v`` pairs joined by
``,``), ``%K`` / ``%V`` key and value length in bytes, ``%H`` header count, ``%%`` a
percent sign; escapes ``\\n``, ``\\t``, ``\\r``, ``\\\\``. No newline is added: put
``\\n`` where lines should end, as rpk does. A null key, value or header value
prints as nothing (its length as -1). An unknown directive or a lone ``%`` or ``\\``
at the end is a ``ValueError`` naming it (the tool turns it into an argparse error).
Records are confluent-kafka ``Message`` objects; nothing here talks to a broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


def _blob(data: bytes | None) -> bytes:
    return b"" if data is None else data


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(msg: Any) -> bytes:
    return b",".join(k.encode() + b":" + _blob(v) for k, v in msg.headers() or [])


_DIRECTIVES: dict[str, Callable[[Any], bytes]] = {
    "t": lambda m: m.topic().encode(),
    "p": lambda m: str(m.partition()).encode(),
    "o": lambda m: str(m.offset()).encode(),
    "k": lambda m: _blob(m.key()),
    "v": lambda m: _blob(m.value()),
    "T": lambda m: str(m.timestamp()[1]).encode(),
    "h": _headers,
    "K": lambda m: _length(m.key()),
    "V": lambda m: _length(m.value()),
    "H": lambda m: str(len(m.headers() or [])).encode(),
}


class RecordFormat:
    """A compiled format string: ``format(msg)`` gives the record's bytes."""

    def __init__(self, text: str) -> None:
        self.pieces: list[bytes | Callable[[Any], bytes]] = []
        literal = bytearray()
        i = 0
        while i < len(text):
            ch = text[i]
            if ch in "%\\":
                if i + 1 == len(text):
                    raise ValueError(f"format ends with a lone {ch!r}")
                nxt = text[i + 1]
                if ch == "%" and nxt == "%":
                    literal += b"%"
                elif ch == "%":
                    render = _DIRECTIVES.get(nxt)
                    if render is None:
                        known = " ".join(f"%{d}" for d in _DIRECTIVES)
                        raise ValueError(f"unknown directive %{nxt} (known: {known} %%)")
                    if literal:
                        self.pieces.append(bytes(literal))
                        literal.clear()
                    self.pieces.append(render)
                else:
                    escaped = _ESCAPES.get(nxt)
                    if escaped is None:
                        raise ValueError(f"unknown escape \\{nxt} (known: \\n \\t \\r \\\\)")
                    literal += escaped
                i += 2
                continue
            literal += ch.encode()
            i += 1
        if literal:
            self.pieces.append(bytes(literal))

    def format(self, msg: Any) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(msg) for p in self.pieces)
