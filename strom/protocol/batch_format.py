"""The two facts of the record batch format that compression needs too: the codec ids
of a batch's attributes, and the error for bytes that are not an intact batch. Here so
that ``codecs`` and ``records`` both build on them without importing each other."""

from __future__ import annotations

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4


class CorruptBatchError(ValueError):
    """The bytes are not a well-formed, intact magic-2 record batch."""
