"""Fixtures the storage unit tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.storage import FileHandleCache


@pytest.fixture
def handles() -> Iterator[FileHandleCache]:
    """A small fd cache, closed after the test."""
    cache = FileHandleCache(16)
    yield cache
    cache.close_all()
