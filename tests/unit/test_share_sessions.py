"""The share session cache: bounded, making room by evicting sessions of members that
left, then sessions idle beyond their group's session timeout, else refusing; telling
when a group's last session here ended."""

from __future__ import annotations

from strom.coordinator.share_sessions import ShareSessionCache

IDLE_MS = 1000


def _cache(limit: int, left: set[tuple[str, str]]) -> ShareSessionCache:
    return ShareSessionCache(lambda: limit, lambda g, m: (g, m) in left, lambda _g: IDLE_MS)


def test_a_full_cache_evicts_the_sessions_of_members_that_left_first() -> None:
    left: set[tuple[str, str]] = set()
    cache = _cache(2, left)
    assert cache.open("g", "a", 0) is not None
    assert cache.open("g", "b", 0) is not None
    assert cache.open("g", "c", 10) is None  # full, nobody left, nobody idle long enough
    left.add(("g", "a"))
    opened = cache.open("g", "c", 20)
    assert opened is not None and opened.next_epoch == 1
    assert sorted(cache) == [("g", "b"), ("g", "c")]
    assert cache.evicted == 1


def test_then_the_longest_idle_beyond_the_session_timeout() -> None:
    cache = _cache(2, set())
    cache.open("g", "a", 0)
    cache.open("g", "b", 500)
    assert cache.open("g", "c", 1400) is not None  # a idle 1400 ms > 1000: evicted
    assert sorted(cache) == [("g", "b"), ("g", "c")]
    cache["g", "b"].last_used_ms = 1450  # in use
    assert cache.open("g", "d", 1500) is None  # b and c are not idle long enough


def test_reopening_a_members_session_replaces_it_without_room() -> None:
    cache = _cache(1, set())
    first = cache.open("g", "a", 0)
    assert first is not None
    first.next_epoch = 7
    again = cache.open("g", "a", 1)
    assert again is not None and again.next_epoch == 1 and len(cache) == 1


def test_the_end_of_a_groups_last_session_here_is_told_once() -> None:
    emptied: list[str] = []
    cache = ShareSessionCache(lambda: 3, lambda _g, _m: False, lambda _g: IDLE_MS, emptied.append)
    cache.open("g", "a", 0)
    cache.open("g", "b", 0)
    cache.open("h", "c", 0)
    assert cache.end("g", "a") and emptied == []  # b is still here
    cache.open("g", "b", 1)  # reopened in place: not an end
    assert emptied == []
    assert cache.end("g", "b") and emptied == ["g"]
    assert not cache.end("g", "b") and emptied == ["g"]  # no session: nothing to tell
    cache.open("g", "d", 10)
    cache.open("g", "e", 10)
    assert cache.open("k", "f", 5000) is not None  # h's idle session evicted to make room
    assert emptied == ["g", "h"] and sorted(cache) == [("g", "d"), ("g", "e"), ("k", "f")]
