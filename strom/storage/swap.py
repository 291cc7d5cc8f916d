"""Crash-safe replacement of runs of segments by rewritten segments (the cleaner's swap).

Owns: the on-disk protocol and its start-up recovery. The cleaner writes each new
segment as ``{base}.log.cleaned`` (and ``.index.cleaned``, ``.timeindex.cleaned``),
fsynced; the swap of one cleaning then

1. writes the manifest ``cleaner-swap`` atomically, one line ``base end`` per new
   segment (it replaces the old segments with base offsets in [base, end)): the
   manifest is the commit point;
2. renames the cleaned files to ``*.swap``;
3. retires the old segments in (base, end) (their owner renames them ``*.deleted``);
4. renames the ``*.swap`` files over ``{base}.log`` / ``.index`` / ``.timeindex``
   (atomic replacement of the old segment at ``base``; the ``.log`` last), fsyncs
   the directory, and removes the manifest.

Steps 1-2 and the end of step 4 (the fsyncs) are file work the owner may run off its
thread (:func:`commit`, :func:`finish`); steps 3-4's renames (:func:`install_files`)
go with the owner's switch of its segment list, in one step, so a reader never sees a
segment whose file is not yet in place.

The same goes for each segment's ``.txnindex`` when there is one.

``recover(directory)`` runs before a partition log is opened: with a manifest it
finishes steps 2-4 for every line (roll forward); without one it removes
``.cleaned`` / ``.swap`` files (roll back). A ``kill -9`` at any moment thus leaves
either all the old segments or all the new ones of a cleaning, never a mix.
Does not own: what goes into the cleaned segments (cleaner.py) or the in-memory
segment list (partition_log.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from strom.storage.durable import fsync_dir, unlink_all, write_atomically
from strom.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    segment_file,
)
from strom.storage.txn_index import TXNINDEX_SUFFIX

log = logging.getLogger(__name__)

MANIFEST = "cleaner-swap"
# The .log always last. A segment without aborted transactions has no .txnindex: the
# renames skip missing files, and a cleaned segment has one whenever any segment it
# replaces had one (cleaner.py copies their entries).
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX)
Range = tuple[int, int]  # (base of the new segment, base of the segment after the old run)


def write_manifest(directory: Path | str, ranges: list[Range]) -> None:
    data = "".join(f"{base} {end}\n" for base, end in ranges).encode()
    write_atomically(os.path.join(directory, MANIFEST), data)


def read_manifest(directory: Path | str) -> list[Range] | None:
    try:
        with open(os.path.join(directory, MANIFEST), encoding="ascii") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        return [(int(a), int(b)) for a, b in (line.split() for line in text.splitlines())]
    except ValueError:
        log.warning("ignoring a malformed %s in %s", MANIFEST, directory)
        return None


def remove_manifest(directory: Path | str) -> None:
    unlink_all(os.path.join(directory, name) for name in (MANIFEST, MANIFEST + ".tmp"))


def _rename_all(directory: Path | str, base: int, source: str, target: str) -> None:
    for suffix in SEGMENT_SUFFIXES:
        path = segment_file(directory, base, suffix)
        try:
            os.replace(path + source, path + target)
        except FileNotFoundError:
            pass  # already renamed before a crash


def commit(directory: Path | str, ranges: list[Range]) -> None:
    """Steps 1-2: the manifest (commit point), then cleaned -> swap."""
    write_manifest(directory, ranges)
    for base, _end in ranges:
        _rename_all(directory, base, CLEANED_SUFFIX, SWAP_SUFFIX)


def install_files(directory: Path | str, ranges: list[Range]) -> None:
    """Step 4's renames: the swap files over the segments at each base (cheap; the
    owner does them in the same step as it switches its segment list)."""
    for base, _end in ranges:
        _rename_all(directory, base, SWAP_SUFFIX, "")


def finish(directory: Path | str) -> None:
    """The end of step 4: make the renames durable, then drop the manifest. Until the
    manifest is gone a restart redoes steps 2-4, which is harmless."""
    fsync_dir(directory)
    remove_manifest(directory)


def install(directory: Path | str, ranges: list[Range]) -> None:
    """Step 4 whole."""
    install_files(directory, ranges)
    finish(directory)


def roll_back(directory: Path | str, bases: list[int]) -> None:
    """Undo steps 1-2 of a swap whose step 3 never began: the manifest first (so a
    crash in between still finds a whole swap to finish), then its files."""
    remove_manifest(directory)
    fsync_dir(directory)
    for base in bases:
        _discard(directory, base, SWAP_SUFFIX)
        _discard(directory, base, CLEANED_SUFFIX)


def discard_cleaned(directory: Path | str, base: int) -> None:
    _discard(directory, base, CLEANED_SUFFIX)


def _discard(directory: Path | str, base: int, leftover: str) -> None:
    unlink_all(segment_file(directory, base, suffix) + leftover for suffix in SEGMENT_SUFFIXES)


def recover(directory: Path | str) -> None:
    """Finish or roll back a swap interrupted by a crash (see the module docstring)."""
    directory = str(directory)
    if not os.path.isdir(directory):
        return
    ranges = read_manifest(directory)
    if ranges:
        for base, _end in ranges:
            _rename_all(directory, base, CLEANED_SUFFIX, SWAP_SUFFIX)
        for name in os.listdir(directory):
            if len(name) > 20 and name[:20].isdigit() and name[20:] in SEGMENT_SUFFIXES:
                at = int(name[:20])
                if any(base < at < end for base, end in ranges):
                    os.unlink(os.path.join(directory, name))
        install(directory, ranges)
        log.warning("%s: finished a cleaner swap interrupted by a crash", directory)
    rolled_back = False
    for name in os.listdir(directory):
        if name.endswith(SWAP_SUFFIX) or name.endswith(CLEANED_SUFFIX):
            os.unlink(os.path.join(directory, name))
            rolled_back = True
    remove_manifest(directory)
    if rolled_back:
        log.warning("%s: rolled back an unfinished cleaning", directory)
