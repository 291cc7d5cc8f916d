"""Java-style ``.properties`` files given to the tools (``--command-config``, ``--producer.config``,
``--consumer.config``), as Kafka's tools take them.

Owns reading such a file into a ``{key: value}`` dict: ``#`` and ``!`` comments, blank
lines, ``key=value``, ``key: value`` and ``key value`` separators, a trailing backslash
continuing a line, and the ``\\t \\n \\r \\\\ \\=`` escapes. A file that cannot be read
or a line with a key but no value separator is an argparse error (one line, exit 2)
naming the file and line. The Java client's security names are translated to
librdkafka's (``strom.client_security``), so a file written for Kafka's tools works;
otherwise what the keys mean is the client's business: they are passed through to
librdkafka, which rejects a property it does not know (one line, exit 1).

``cluster_access(args)`` reads the file once into what a tool needs to reach its
cluster both ways: the client properties for confluent-kafka and the
``ClientSecurity`` of its own raw-protocol requests (``strom.cli.wire``), sent to the
active controller when the tool was given ``--bootstrap-controller``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kio.static.protocol import RequestPayload

from strom.cli import wire
from strom.cli.common import client_config
from strom.client_security import ClientSecurity, librdkafka_properties

_SEPARATOR = re.compile(r"(?<!\\)(?:\\\\)*([=:]|\s)")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file that cannot be read or holds a line that is not key=value."""


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending is not None else raw.strip()
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
            pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes: the line goes on
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = None
    if pending is not None:
        lines.append((start, pending))
    return lines


def parse_properties_text(text: str, source: str = "properties") -> dict[str, str]:
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        match = _SEPARATOR.search(line)
        if match is None:
            raise PropertiesError(f"{source} line {number}: expected key=value, got {line!r}")
        key = _unescape(line[: match.start(1)].strip())
        value = line[match.end(1) :].lstrip()
        if match.group(1).isspace() and value[:1] in ("=", ":"):
            value = value[1:].lstrip()
        if not key:
            raise PropertiesError(f"{source} line {number}: no key before the separator")
        result[key] = _unescape(value)
    return result


def read_properties_file(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PropertiesError(f"cannot read {path}: not UTF-8 text") from None
    return parse_properties_text(text, path)


def add_config_file_option(
    parser: argparse.ArgumentParser, option: str, client: str, default: Any = None
) -> None:
    """``option FILE``; ``default=argparse.SUPPRESS`` for a subcommand's copy of an option
    its parent parser has too, so that a value given before the subcommand stays."""
    parser.add_argument(
        option,
        dest="config_file",
        default=default,
        metavar="FILE",
        help=f"properties file with {client} configs (Java client or librdkafka names), "
        "e.g. security settings",
    )


def config_file_properties(args: argparse.Namespace) -> dict[str, Any]:
    """The properties of the file given to the tool's config-file option (``{}`` without one),
    the Java client's security names translated to librdkafka's
    (``client_security.librdkafka_properties``); a bad file is the tool's argparse error."""
    path = getattr(args, "config_file", None)
    if not path:
        return {}
    try:
        return librdkafka_properties(read_properties_file(path))
    except (PropertiesError, ValueError) as exc:
        args.parser.error(f"{path}: {exc}" if not isinstance(exc, PropertiesError) else str(exc))
        raise  # unreachable: error() exits


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """How the tool's own raw-protocol requests connect, from its config file."""
    return _security_of(args, config_file_properties(args))


def _security_of(args: argparse.Namespace, properties: dict[str, Any]) -> ClientSecurity:
    try:
        return ClientSecurity.from_properties(properties)
    except ValueError as exc:
        args.parser.error(f"{args.config_file}: {exc}")
        raise  # unreachable: error() exits


@dataclass(frozen=True)
class ClusterAccess:
    """How a tool reaches its cluster: the bootstrap servers (or, with ``controllers``,
    the bootstrap controllers of ``--bootstrap-controller``), the client properties of
    its config file (librdkafka names) and the security of its own raw requests."""

    bootstrap: str
    properties: dict[str, Any]
    security: ClientSecurity
    controllers: bool = False

    def client_config(self) -> dict[str, Any]:
        """A confluent-kafka client's config: the file's properties, quiet and quick to
        fail (librdkafka cannot talk to controllers: never with ``controllers``)."""
        assert not self.controllers, "librdkafka does not talk to controllers"
        return client_config(self.bootstrap, self.properties)

    @cached_property
    def controller(self) -> wire.Controller:
        """The active controller, found through the bootstrap controllers once."""
        return wire.active_controller(self.bootstrap, self.security)

    def send(self, request: RequestPayload, what: str, address: str | None = None) -> Any:
        """``request`` to the first reachable bootstrap broker, to the active controller
        (``controllers``, as Kafka's admin client sends a request there) or to
        ``address``, over TLS and SASL as the file says; its response
        (``strom.cli.wire.send``)."""
        if address is None and self.controllers:
            self.controller.check_served(request)
            address = self.controller.address
        return wire.send(address or self.bootstrap, request, what, self.security)


def cluster_access(args: argparse.Namespace, bootstrap: str | None = None) -> ClusterAccess:
    """The tool's ``ClusterAccess``: ``bootstrap``, its ``--bootstrap-controller`` when
    given, else its ``--bootstrap-server``; a bad config file is the tool's argparse error."""
    properties = config_file_properties(args)
    controllers = None if bootstrap else getattr(args, "bootstrap_controller", None)
    return ClusterAccess(
        bootstrap or controllers or args.bootstrap_server,
        properties,
        _security_of(args, properties),
        controllers=controllers is not None,
    )
