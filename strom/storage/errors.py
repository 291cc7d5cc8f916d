"""Exceptions raised by the storage layer.

Owns: the storage error types. Does not own: mapping them to Kafka error codes on
the wire (the broker does that: OffsetOutOfRangeError -> OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error raised by strom.storage."""


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start offset or above the log end offset."""


class LogDirLockedError(StorageError):
    """Another process holds the lock of this log directory."""
