"""``strom configs`` for client quotas: ``--entity-type users|clients``, like kafka-configs.sh.

An entity is a user, a client id or both: ``--entity-type users --entity-name alice``
(or ``--entity-default`` for the default user), ``--entity-type clients ...``, or the
kafka-configs.sh shortcuts ``--user alice`` / ``--user-defaults`` and ``--client c1`` /
``--client-defaults``, which combine (``--user alice --client c1``). ``--alter`` sends
one AlterClientQuotas request (``--add-config producer_byte_rate=1048576,...`` sets,
``--delete-config consumer_byte_rate`` removes); ``--describe`` sends
DescribeClientQuotas and prints one line per entity as kafka-configs.sh does (``Quota
configs for user-principal 'alice' are producer_byte_rate=1048576.0``). Without a name,
``--describe`` lists every entity of the type. confluent-kafka has no client quota API,
so the requests go over ``strom.cli.wire``, over TLS and SASL as ``--command-config`` says,
to a broker or, with ``--bootstrap-controller``, to the active controller (which, as
Kafka's, changes quotas but does not describe them: one line says so).
"""

from __future__ import annotations

import argparse
from typing import Any, cast

from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.describe_client_quotas.v1 import request as describe
from kio.static.primitive import f64, i8

from strom.cli import wire
from strom.cli.common import ToolError
from strom.cli.properties_file import ClusterAccess
from strom.protocol.errors import ErrorCode

ENTITY_TYPES = {"users": "user", "clients": "client-id"}
NOUNS = {"user": "user-principal", "client-id": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = i8(0), i8(1), i8(2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    quotas = parser.add_argument_group("client quotas (users and clients)")
    quotas.add_argument(
        "--entity-default",
        action="store_true",
        help="the default user or client id instead of --entity-name",
    )
    quotas.add_argument("--user", help="a user principal's name (combines with --client)")
    quotas.add_argument("--user-defaults", action="store_true", help="the default user")
    quotas.add_argument("--client", help="a client id (combines with --user)")
    quotas.add_argument("--client-defaults", action="store_true", help="the default client id")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command is about client quotas."""
    return args.entity_type in ENTITY_TYPES or any(
        (args.user, args.user_defaults, args.client, args.client_defaults)
    )


def _entity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """Entity type -> name (None: the default, ... : any name, for --describe)."""
    entity: dict[str, Any] = {}
    if args.entity_type in ENTITY_TYPES:
        if args.entity_name is not None and args.entity_default:
            parser.error("--entity-name and --entity-default exclude each other")
        if args.entity_name is not None:
            entity[ENTITY_TYPES[args.entity_type]] = args.entity_name
        elif args.entity_default:
            entity[ENTITY_TYPES[args.entity_type]] = None
        else:
            entity[ENTITY_TYPES[args.entity_type]] = ...
    elif args.entity_type is not None:
        parser.error("--user and --client go without --entity-type, or with users or clients")
    for kind, name, default in (
        ("user", args.user, args.user_defaults),
        ("client-id", args.client, args.client_defaults),
    ):
        if name is not None and default:
            parser.error(f"give a {kind} name or its defaults, not both")
        if name is None and not default:
            continue
        if kind in entity and entity[kind] is not ...:
            parser.error(f"the {kind} is given twice")
        entity[kind] = name
    if args.alter and any(v is ... for v in entity.values()):
        parser.error("--alter needs --entity-name or --entity-default")
    return entity


def _label(entity: dict[str, str | None]) -> str:
    parts = []
    for kind in ("user", "client-id"):
        if kind in entity:
            name = entity[kind]
            parts.append(
                f"the default {NOUNS[kind]}" if name is None else f"{NOUNS[kind]} {name!r}"
            )
    return ", ".join(parts)


def _number(parser: argparse.ArgumentParser, key: str, text: str) -> f64:
    try:
        value = float(text)
    except ValueError:
        parser.error(f"{key} takes a number, not {text!r}")
    # unchecked (f64() would refuse inf and nan here): the broker judges the value
    return cast(f64, value)


def run(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    access: ClusterAccess,
    adds: dict[str, str],
    deletes: list[str],
) -> int:
    entity = _entity(parser, args)
    if args.all:
        parser.error("--all is for topics and brokers")
    if args.describe:
        return _describe(access, entity)
    ops = tuple(
        alter.OpData(key=key, value=_number(parser, key, value), remove=False)
        for key, value in adds.items()
    ) + tuple(alter.OpData(key=key, value=f64(0.0), remove=True) for key in deletes)
    entry = alter.EntryData(
        entity=tuple(alter.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=ops,
    )
    request = alter.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
    response = access.send(request, "alter client quotas")
    label = _label(entity)
    for result in response.entries:
        if result.error_code != ErrorCode.none:
            reason = result.error_message or wire.error_name(result.error_code)
            raise ToolError(f"cannot alter quotas of {label}: {reason}")
    print(f"Completed updating config for {label}.")
    return 0


def _describe(access: ClusterAccess, entity: dict[str, Any]) -> int:
    components = tuple(
        describe.ComponentData(
            entity_type=kind,
            match_type=MATCH_ANY if name is ... else MATCH_DEFAULT if name is None else MATCH_EXACT,
            match=None if name is ... else name,
        )
        for kind, name in entity.items()
    )
    request = describe.DescribeClientQuotasRequest(components=components, strict=True)
    response = access.send(request, "describe client quotas")
    if response.error_code != ErrorCode.none:
        reason = response.error_message or wire.error_name(response.error_code)
        raise ToolError(f"cannot describe client quotas: {reason}")
    entries = response.entries or ()
    if not entries and not any(v is ... for v in entity.values()):
        print(f"Quota configs for {_label(entity)} are ")
    for item in entries:
        found = {e.entity_type: e.entity_name for e in item.entity}
        values = ", ".join(f"{v.key}={v.value}" for v in item.values)
        print(f"Quota configs for {_label(found)} are {values}")
    return 0
