"""Offset checkpoint files in Kafka's text format.

Owns: reading and atomically writing files such as ``recovery-point-offset-checkpoint``
and ``log-start-offset-checkpoint``::

    0                 version
    2                 number of entries
    orders 0 1234     topic partition offset
    orders 1 998

Does not own: deciding what goes in them (log_manager.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from strom.storage.durable import write_atomically

log = logging.getLogger(__name__)

VERSION = 0


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The entries of a checkpoint file; {} if it is missing or malformed (logged)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        entries: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
    except (ValueError, IndexError) as exc:
        log.warning("ignoring malformed checkpoint file %s: %s", path, exc)
        return {}
    return entries


def write_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    """Write ``entries`` atomically: temporary file, fsync, rename, fsync the directory."""
    lines = [str(VERSION), str(len(entries))]
    lines.extend(
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    )
    write_atomically(path, ("\n".join(lines) + "\n").encode())
