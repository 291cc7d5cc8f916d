"""Strom's log storage: segments, indexes, partition logs and the log manager.

Owns everything on disk under ``log.dirs``; see each module's docstring. Imports only
``strom.protocol``, the standard library and, for the metadata log's entries,
``strom.raft.messages``; no sockets, no asyncio.
"""

from strom.storage.errors import LogDirLockedError, OffsetOutOfRangeError, StorageError
from strom.storage.handles import FileHandleCache
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.partition_log import PartitionLog

__all__ = [
    "FileHandleCache",
    "LogConfig",
    "LogDirLockedError",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "StorageError",
]
