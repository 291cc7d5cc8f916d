"""How every kind of group describes a member: its client host as Kafka writes it
(``/`` and the address), and durations in milliseconds from kio's fields."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.network.router import RequestContext


def millis(value: datetime.timedelta | int | None, default: int = -1) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def client_host(ctx: RequestContext) -> str:
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host
