"""Durable file operations shared by the storage and the metadata store.

Owns the steps every crash-safe file change here is made of: fsync a directory (so a
created, renamed or removed name survives a crash), replace a small file atomically
(temporary file, fsync, rename over the old one, fsync the directory), and unlink
files that may already be gone. Does not own what goes into those files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def fsync_dir(directory: Path | str) -> None:
    """fsync a directory, making the names created or renamed in it durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_all(paths: Iterable[str]) -> int:
    """Unlink ``paths`` (missing ones skipped); returns how many went. Any thread."""
    count = 0
    for path in paths:
        try:
            os.unlink(path)
            count += 1
        except FileNotFoundError:
            pass
    return count


def write_atomically(
    path: Path | str, data: bytes | bytearray | memoryview, *, sync: bool = True
) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file whole.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory.
    With ``sync`` False the two fsyncs are the caller's to make (a power loss may then
    leave the old file, or an empty one, until they are).
    """
    path = os.fspath(path)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")
