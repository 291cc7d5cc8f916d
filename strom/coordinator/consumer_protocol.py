"""Reading the consumer protocol's subscription bytes (ConsumerProtocolSubscription).

The broker treats classic group metadata as opaque except where Kafka looks
inside: OffsetDelete asks which topics a "consumer" group subscribes to. The
bytes are an int16 version and the kio-decoded body; versions newer than kio
knows are read with the newest schema (later versions only append fields).
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from kio.serial import entity_reader

_NEWEST = 3


@cache
def _reader(version: int) -> Any:
    module = __import__(
        f"kio.schema.consumer_protocol_subscription.v{version}.data",
        fromlist=["ConsumerProtocolSubscription"],
    )
    return entity_reader(module.ConsumerProtocolSubscription)


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics in a subscription, or None when the bytes cannot be read."""
    if len(metadata) < 2:
        return None
    (version,) = struct.unpack_from(">h", metadata)
    if version < 0:
        return None
    try:
        body, _ = _reader(min(version, _NEWEST))(metadata, 2)
    except Exception:
        return None
    return set(body.topics)
