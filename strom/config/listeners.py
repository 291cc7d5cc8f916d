"""Addresses in configs: Kafka listeners (``NAME://host:port``), HTTP listeners, the
quorum's voters, the security protocol map, host:port pairs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from strom.config.broker_keys import SECURITY_PROTOCOLS
from strom.config.values import ConfigError, parse_list


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class QuorumVoter:
    """One entry of ``controller.quorum.voters``: ``node_id@host:port``."""

    node_id: int
    host: str
    port: int


_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _parse_port(text: str, problem: str, lowest: int = 0) -> int:
    try:
        port = int(text)
        if not lowest <= port <= 65535:
            raise ValueError
    except ValueError:
        raise ConfigError(f"{problem}: port must be {lowest}-65535") from None
    return port


# Addresses a server binds to meaning "every interface": never one a client can reach.
NON_ROUTABLE_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})


def parse_listener(spec: str, key: str = "listeners") -> Listener:
    """``NAME://host:port`` (host may be empty for all interfaces); the name is
    upper-cased, as Kafka normalises listener names. Whether its security protocol is
    known is BrokerConfig's check (listener.security.protocol.map)."""
    problem = f"Invalid value {spec!r} for configuration {key}"
    name, sep, rest = spec.strip().partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not _LISTENER_NAME.match(name):
        raise ConfigError(f"{problem}: expected NAME://host:port")
    port = _parse_port(port_text, problem)
    return Listener(name.upper(), host.strip("[]"), port)


_HTTP_LISTENER = re.compile(r"^(https?)://(\[[^\]]*\]|[^:/\[\]]*):([^/]*)/?$")


def parse_http_listener(
    spec: str, key: str = "", schemes: tuple[str, ...] = ("http",)
) -> tuple[str, str, int]:
    """(scheme, host, port) of an HTTP listener, ``SCHEME://HOST:PORT`` with one of
    ``schemes`` (an empty host: every interface); ``key`` names the setting in errors."""
    prefix = f"{key}: " if key else ""
    match = _HTTP_LISTENER.match(spec.strip())
    if match is None or match.group(1) not in schemes:
        shapes = " or ".join(f"{scheme}://HOST:PORT" for scheme in schemes)
        raise ConfigError(f"{prefix}{spec!r} is not {shapes} (e.g. http://127.0.0.1:9644)")
    port = _parse_port(match.group(3), f"{prefix}{spec!r} has no valid port")
    return match.group(1), match.group(2).strip("[]") or "0.0.0.0", port


def parse_admin_listener(spec: str, key: str = "admin.listeners") -> tuple[str, str, int]:
    """(scheme, host, port) of an HTTP listener setting (``admin.listeners`` and the
    embedded services'), ``http://HOST:PORT`` or ``https://HOST:PORT``."""
    return parse_http_listener(spec, key, schemes=("http", "https"))


def parse_host_port(entry: str, key: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) with a port of 1-65535."""
    problem = f"Invalid value {entry!r} for configuration {key}"
    host, colon, port_text = entry.strip().rpartition(":")
    host = host.strip("[]")
    if not colon or not host:
        raise ConfigError(f"{problem}: expected host:port")
    return host, _parse_port(port_text, problem, lowest=1)


def parse_voters(entries: str | Iterable[str]) -> list[QuorumVoter]:
    """``controller.quorum.voters`` (``1@host:9093,2@host:9095``) as typed entries."""
    key = "controller.quorum.voters"
    items = parse_list(entries) if isinstance(entries, str) else list(entries)
    voters: list[QuorumVoter] = []
    seen: set[int] = set()
    for entry in items:
        id_text, at, address = entry.strip().partition("@")
        problem = f"Invalid value {entry!r} for configuration {key}"
        if not at:
            raise ConfigError(f"{problem}: expected id@host:port")
        try:
            node_id = int(id_text)
            if node_id < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{problem}: the voter id must be a node id (0 or more)") from None
        if node_id in seen:
            raise ConfigError(f"{problem}: voter {node_id} is listed twice")
        seen.add(node_id)
        host, port = parse_host_port(address, key)
        voters.append(QuorumVoter(node_id, host, port))
    return voters


def parse_protocol_map(entries: str | Iterable[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) as a dict."""
    key = "listener.security.protocol.map"
    items = parse_list(entries) if isinstance(entries, str) else list(entries)
    mapping: dict[str, str] = {}
    for entry in items:
        name, colon, protocol = entry.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        problem = f"Invalid value {entry!r} for configuration {key}"
        if not colon or not name or not protocol:
            raise ConfigError(f"{problem}: expected LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{problem}: unknown security protocol {protocol} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in mapping:
            raise ConfigError(f"{problem}: listener {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def check_distinct(listeners: list[Listener], key: str, *, ports: bool = True) -> None:
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"Each listener in {key} must have a different name; {dup} is repeated")
    if ports:
        bound = [lst.port for lst in listeners if lst.port != 0]
        if len(set(bound)) != len(bound):
            dup_port = next(p for p in bound if bound.count(p) > 1)
            raise ConfigError(
                f"Each listener in {key} must have a different port; {dup_port} is repeated"
            )
