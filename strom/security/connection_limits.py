"""How many connections a broker holds, as Kafka's ConnectionQuotas bounds them.

Owns ``max.connections.per.ip`` (every listener; a connection over it is closed as soon
as it is accepted), its ``max.connections.per.ip.overrides`` (``host:count`` pairs, a
host by IP address or by a name resolved when the setting is read; an override of 0
refuses the address) and ``max.connections`` (the broker's total, not counting its
controller listeners, nor its inter-broker listener when clients have another, which
Kafka also keeps open to the cluster's own nodes: past it a new client connection is
closed, where Kafka's acceptor would hold it until one goes). Both are dynamic broker
configs, read at each new connection.

Does not own the sockets (the broker's server admits and releases connections).
"""

from __future__ import annotations

import socket
from collections import Counter
from typing import Any, Protocol

from strom.config import parse_host_counts


class Settings(Protocol):
    """Where the limits are read from, at each connection (they change at run time)."""

    def __getitem__(self, key: str) -> Any: ...


class ConnectionLimits:
    def __init__(self, config: Settings) -> None:
        self.config = config
        self.per_ip: Counter[str] = Counter()
        self.counted = 0  # connections that count towards max.connections
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}

    def _limit_for(self, ip: str) -> int:
        text = str(self.config["max.connections.per.ip.overrides"] or "")
        if text != self._overrides_text:
            self._overrides = parse_overrides(text)
            self._overrides_text = text
        return self._overrides.get(ip, int(self.config["max.connections.per.ip"]))

    def admit(self, ip: str, *, counted: bool) -> str | None:
        """Take a new connection from ``ip`` (``counted``: on a listener that counts
        towards max.connections); why it must be closed instead, or None."""
        limit = self._limit_for(ip)
        if self.per_ip[ip] >= limit:
            return f"{ip} holds {self.per_ip[ip]} connections (max.connections.per.ip {limit})"
        if counted and self.counted >= int(self.config["max.connections"]):
            return f"the broker holds {self.counted} connections (max.connections)"
        self.per_ip[ip] += 1
        if counted:
            self.counted += 1
        return None

    def release(self, ip: str, *, counted: bool) -> None:
        """A connection ``admit`` took has closed."""
        left = self.per_ip[ip] - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            del self.per_ip[ip]
        if counted:
            self.counted -= 1


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` as IP address -> count (names resolved now); ValueError
    for a bad entry."""
    overrides: dict[str, int] = {}
    for host, count in parse_host_counts(text):
        try:
            address = socket.gethostbyname(host)
        except OSError:
            address = host
        overrides[address] = count
    return overrides
