"""The share session cache of a node (KIP-932): the share sessions its ShareFetch and
ShareAcknowledge requests run in, keyed by (group id, member id), bounded by
``group.share.max.share.sessions`` as Kafka bounds its share session cache.

Owns the sessions and the room for a new one: when the cache is full, the sessions of
members that left their group go first, then those idle for longer than their group's
share session timeout (their member was removed from the group by then); if none can
go, the new session is refused (SHARE_SESSION_LIMIT_REACHED, the caller's answer).
When the last session of a group here ends (closed, its member gone, evicted), the
``group_empty`` callback is told, as Kafka's share session cache tells its share group
listener: the node then lets go of the group's share-partitions.
Knows nothing of the wire or of share-partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

SessionKey = tuple[str, str]  # (group id, member id)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    last_used_ms: int = 0


class ShareSessionCache(dict[SessionKey, ShareSession]):
    """The sessions by (group id, member id), at most ``limit`` of them."""

    def __init__(
        self,
        limit: Callable[[], int],
        member_left: Callable[[str, str], bool],
        idle_limit_ms: Callable[[str], int],
        group_empty: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self.limit = limit
        self.member_left = member_left
        self.idle_limit_ms = idle_limit_ms
        self.group_empty = group_empty
        self.evicted = 0

    def end(self, group_id: str, member_id: str) -> bool:
        """End the member's session, if it has one here; when it was its group's last
        one here, ``group_empty`` is told. Whether there was one."""
        if self.pop((group_id, member_id), None) is None:
            return False
        if self.group_empty is not None and not any(g == group_id for g, _ in self):
            self.group_empty(group_id)
        return True

    def open(self, group_id: str, member_id: str, now_ms: int) -> ShareSession | None:
        """A new session (epoch 1 next) in place of the member's old one; None when the
        cache is full and no session may be evicted."""
        key = (group_id, member_id)
        self.pop(key, None)
        if len(self) >= self.limit() and not self._make_room(now_ms):
            return None
        session = self[key] = ShareSession(group_id, member_id, 1, last_used_ms=now_ms)
        return session

    def _make_room(self, now_ms: int) -> bool:
        """Evict to leave room for one more session: members that left, then the
        longest idle beyond their group's session timeout; whether there is room."""
        for key in [k for k in self if self.member_left(*k)]:
            self.end(*key)
            self.evicted += 1
        idle = sorted(
            (s.last_used_ms, k)
            for k, s in self.items()
            if now_ms - s.last_used_ms > self.idle_limit_ms(s.group_id)
        )
        for _, key in idle:
            if len(self) < self.limit():
                break
            self.end(*key)
            self.evicted += 1
        return len(self) < self.limit()
