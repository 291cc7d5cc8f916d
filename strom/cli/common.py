"""What the Kafka-style tools share: bootstrap option, ``k=v`` parsing, client configs, errors.

Owns the one-line argparse errors (exit 2), the ``ToolError`` that a tool raises
for an expected failure (one line on stderr, exit 1), the quiet client config
(librdkafka's own log lines go to a logger that drops them) and the reachability
check every tool makes first. It does not know any broker internals: everything
here works against any Kafka cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException

from strom.wire_client import parse_address

# $STROM_BOOTSTRAP_SERVER, when set, stands in for --bootstrap-server in every tool.
DEFAULT_BOOTSTRAP = os.environ.get("STROM_BOOTSTRAP_SERVER") or "127.0.0.1:9092"
CONNECT_TIMEOUT_S = 5.0
EXIT_ERROR = 1
EXIT_USAGE = 2

_quiet = logging.getLogger("strom.cli.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class ToolError(Exception):
    """An expected failure: reported as one line on stderr, exit code 1."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """Argument errors in one line (``strom topics: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_WIRE_INT_RANGES = {
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def wire_int(kind: str) -> Callable[[str], int]:
    """An argparse ``type`` for a number that goes into a Kafka ``kind`` field (int16,
    int32, int64): one out of its range is an argument error, not a traceback when the
    request is built."""
    low, high = _WIRE_INT_RANGES[kind]

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: at most {high} and at least {low}"
            )
        return value

    parse.__name__ = kind
    return parse


def add_bootstrap(parser: argparse.ArgumentParser, *, controller: bool = False) -> None:
    """``--bootstrap-server``; with ``controller``, ``--bootstrap-controller`` too, where
    Kafka's tool takes it (KIP-919): the tool then talks to the controller quorum at its
    controller listener. Given both, the tool stops with one line (exit 2)."""
    target: Any = parser.add_mutually_exclusive_group() if controller else parser
    target.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    if controller:
        target.add_argument(
            "--bootstrap-controller",
            metavar="HOST:PORT",
            help="controller(s) to talk to directly at their controller listener, "
            "comma-separated, instead of a broker",
        )


def add_override_options(parser: argparse.ArgumentParser) -> None:
    """``--override key=value`` (repeatable) and ``--log-level``, as the servers started
    from a properties file take them (``broker``, ``ksql-server``)."""
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a property from the file (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])


def unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r`` and ``\\\\`` in a separator typed on a shell line."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "tnr\\":
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[text[i + 1]])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(
    parser: argparse.ArgumentParser, items: Iterable[str] | None, option: str
) -> dict[str, str]:
    """``["k=v", ...]`` to a dict; a malformed item is an argparse error (exit 2)."""
    result: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option} expects key=value, got {item!r}")
        result[key.strip()] = value
    return result


def client_config(bootstrap: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A librdkafka config that fails fast on an unreachable broker and logs nothing."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": int(CONNECT_TIMEOUT_S * 1000),
        "logger": _quiet,
        "error_cb": _ignore_error,
    }
    config.update(extra or {})
    return config


# Login failures a client reported (librdkafka's _AUTHENTICATION): the reason a call
# then failed, which the call's own error ("transport failure") does not say.
_login_failures: list[str] = []


def _ignore_error(err: KafkaError) -> None:
    """Transient client errors (broker down...) surface through the calls that fail; a
    failed login is kept for ``check_reachable`` to name."""
    if err.code() == KafkaError._AUTHENTICATION:
        _login_failures.append(err.str())


def describe_error(exc: BaseException) -> str:
    """``NAME: text`` for a KafkaException, ``str(exc)`` for anything else."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(err, KafkaError):
        text = err.str()
        return f"{err.name()}: {text}" if text and text != err.name() else err.name()
    return str(err)


def error_code(exc: BaseException) -> int | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def refused_everywhere(bootstrap: str) -> str | None:
    """Why no bootstrap server can be reached, when each one refuses a TCP connection
    or its name does not resolve (known at once); None when one accepts, or when it is
    not that simple (a timeout, an odd address): the client finds out then."""
    reasons = []
    for server in bootstrap.split(","):
        address = server.strip().rsplit("://", 1)[-1]
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
                return None
        except ConnectionRefusedError:
            reasons.append(f"{address}: connection refused")
        except socket.gaierror as exc:
            reasons.append(f"{address}: {exc.strerror}")
        except (OSError, ValueError):
            return None
    if len(reasons) == 1:
        return reasons[0].split(": ", 1)[1]
    return "; ".join(reasons) or None


def check_reachable(client: Any, bootstrap: str, topic: str | None = None) -> Any:
    """Cluster metadata within ``CONNECT_TIMEOUT_S``, or a ToolError naming the broker.
    A bootstrap list that refuses every connection is reported at once, not after the
    client's timeout."""
    refused = refused_everywhere(bootstrap)
    if refused is not None:
        raise ToolError(f"cannot reach a broker at {bootstrap}: {refused}")
    try:
        if topic is None:
            return client.list_topics(timeout=CONNECT_TIMEOUT_S)
        return client.list_topics(topic, timeout=CONNECT_TIMEOUT_S)
    except KafkaException as exc:
        poll = getattr(client, "poll", None)
        if poll is not None:  # serves the error callbacks queued meanwhile (a failed login)
            try:
                poll(0)
            except Exception:  # noqa: BLE001 - only callbacks were wanted
                pass
        if _login_failures:
            raise ToolError(f"cannot log in to {bootstrap}: {_login_failures[-1]}") from None
        message = f"cannot reach a broker at {bootstrap}: {describe_error(exc)}"
        hint = security_hint(bootstrap)
        raise ToolError(f"{message}; {hint}" if hint else message) from None


def security_hint(bootstrap: str) -> str | None:
    """Why a reachable broker may not answer the tool: asked for metadata in plaintext
    Kafka, it answers with TLS or closes the connection unanswered (a SASL listener
    serves nothing before authentication). None when it answers, or cannot be asked."""
    server = bootstrap.split(",")[0].strip().rsplit("://", 1)[-1]
    try:
        host, port = parse_address(server)
    except ValueError:
        return None
    # Metadata v0 (an empty topic list: every topic), correlation id 1, client id strom.
    request = struct.pack(">hhih", 3, 0, 1, 5) + b"strom" + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(2.0)
            sock.sendall(struct.pack(">i", len(request)) + request)
            first = sock.recv(8)
    except (OSError, ValueError):
        return None
    if first[:1] == b"\x15" and first[1:2] == b"\x03":  # a TLS alert record
        return (
            f"{server} answers with TLS: set security.protocol=SSL (or SASL_SSL) and the "
            "ssl.* settings in the client properties file the tool takes"
        )
    if not first:
        return (
            f"{server} closed a plaintext request unanswered: it may want SASL or TLS "
            "(security.protocol, sasl.* or ssl.* in the client properties file the tool takes)"
        )
    return None


def fail(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_ERROR


def source_code(source: Any) -> int:
    """A described config's source as Kafka's number (confluent-kafka gives an enum or int)."""
    return int(getattr(source, "value", source))
