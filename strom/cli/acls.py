"""``strom acls --add | --remove | --list``: ACL administration, as kafka-acls.sh.

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and
``--cluster``, with ``--resource-pattern-type`` literal (default for --add and --remove),
prefixed, or, to select, match and any (default for --list). Entries: principals from
``--allow-principal`` / ``--deny-principal`` (``User:alice``), hosts from
``--allow-host`` / ``--deny-host`` (default ``*``) and operations from ``--operation``
(repeatable, default All). ``--producer`` stands for WRITE, DESCRIBE and CREATE on the
topics (and WRITE, DESCRIBE on transactional ids; with ``--idempotent``, IDEMPOTENT_WRITE
on the cluster); ``--consumer`` for READ and DESCRIBE on the topics and READ on the
group. ``--remove`` asks before deleting unless ``--force`` or stdin is not a terminal.
It sends CreateAcls, DescribeAcls and DeleteAcls itself (``strom.cli.wire``: librdkafka's
describe_acls drops the response's error, SECURITY_DISABLED or
CLUSTER_AUTHORIZATION_FAILED, and would print nothing), to a bootstrap broker or, with
``--bootstrap-controller`` as kafka-acls.sh takes it (KIP-919), to the active controller
at its controller listener; a refusal is one line and exit code 1. Works against Kafka
too.
"""

from __future__ import annotations

import argparse
import sys
from enum import Enum
from typing import Any, TypeVar

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.static.primitive import i8

from strom.cli import wire
from strom.cli.common import ToolError, add_bootstrap, check_reachable
from strom.cli.output import emit_json, wants_json
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.protocol.errors import ErrorCode

CLUSTER_NAME = "kafka-cluster"
# confluent-kafka names the cluster resource BROKER (code 4, Kafka's CLUSTER).
CLUSTER = ResourceType.BROKER
_TYPE_NAMES: dict[ResourceType, str] = {
    ResourceType.TOPIC: "TOPIC",
    ResourceType.GROUP: "GROUP",
    CLUSTER: "CLUSTER",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
}
_PATTERNS = {
    "literal": ResourcePatternType.LITERAL,
    "prefixed": ResourcePatternType.PREFIXED,
    "match": ResourcePatternType.MATCH,
    "any": ResourcePatternType.ANY,
}
_OPERATIONS = {
    op.name.replace("_", "").lower(): op
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("acls", help="add, remove or list ACLs (like kafka-acls.sh)")
    add_bootstrap(parser, controller=True)
    add_config_file_option(parser, "--command-config", "admin client")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described")
    action.add_argument("--remove", action="store_true", help="remove the ACLs described")
    action.add_argument("--list", action="store_true", help="list ACLs")
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host"):
        parser.add_argument(flag, action="append", default=[], metavar="VALUE")
    parser.add_argument("--principal", action="append", default=[], help="--list: filter")
    parser.add_argument(
        "--operation", action="append", default=[], help="e.g. Read, Write, All (repeatable)"
    )
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--resource-pattern-type", choices=sorted(_PATTERNS))
    parser.add_argument("--producer", action="store_true")
    parser.add_argument("--consumer", action="store_true")
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--force", action="store_true", help="--remove without asking")
    parser.add_argument(
        "--output",
        choices=("plain", "json"),
        help="with --list: JSON (an array of ACL objects) instead of kafka-acls.sh's text",
    )
    parser.set_defaults(run=run, parser=parser)


def _operation(text: str, parser: argparse.ArgumentParser) -> AclOperation:
    op = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        parser.error(f"unknown --operation {text!r}")
    return op


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((CLUSTER, CLUSTER_NAME))
    return out


def _operations_for(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> dict[tuple[ResourceType, str], list[AclOperation]]:
    """The operations each resource gets (--producer and --consumer expand)."""
    resources = _resources(args)
    if args.producer or args.consumer:
        if args.operation:
            parser.error("--operation cannot be combined with --producer or --consumer")
        if args.consumer and not args.group:
            parser.error("--consumer needs --group")
        out: dict[tuple[ResourceType, str], list[AclOperation]] = {}
        for rtype, name in resources:
            ops: list[AclOperation] = []
            if rtype == ResourceType.TOPIC:
                if args.producer:
                    ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
                if args.consumer:
                    ops += [AclOperation.READ, AclOperation.DESCRIBE]
            elif rtype == ResourceType.GROUP and args.consumer:
                ops.append(AclOperation.READ)
            elif rtype == ResourceType.TRANSACTIONAL_ID and args.producer:
                ops += [AclOperation.WRITE, AclOperation.DESCRIBE]
            if ops:
                out[(rtype, name)] = list(dict.fromkeys(ops))
        if args.producer and args.idempotent:
            out[(CLUSTER, CLUSTER_NAME)] = [AclOperation.IDEMPOTENT_WRITE]
        return out
    ops = [_operation(o, parser) for o in args.operation] or [AclOperation.ALL]
    return {resource: ops for resource in resources}


def _entries(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    out = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals:
            for host in hosts or ["*"]:
                out.append((principal, host, permission))
    return out


def _check_principals(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    for principal in [*args.allow_principal, *args.deny_principal, *args.principal]:
        kind, sep, _ = principal.partition(":")
        if not sep or not kind:
            parser.error(f"a principal is Type:name (User:alice), got {principal!r}")


_E = TypeVar("_E", bound=Enum)


def _enum_part(value: _E | str | int, kind: type[_E]) -> _E:
    """One of a binding's enum parts: confluent-kafka's constructor turns the name or
    code it took into the enum, though its attributes keep the wider type it takes."""
    if not isinstance(value, kind):
        raise TypeError(f"{value!r} is not a {kind.__name__}")
    return value


def _resource_type_of(binding: AclBinding) -> ResourceType:
    return _enum_part(binding.restype, ResourceType)


def _pattern_type_of(binding: AclBinding) -> ResourcePatternType:
    return _enum_part(binding.resource_pattern_type, ResourcePatternType)


def _operation_of(binding: AclBinding) -> AclOperation:
    return _enum_part(binding.operation, AclOperation)


def _permission_of(binding: AclBinding) -> AclPermissionType:
    return _enum_part(binding.permission_type, AclPermissionType)


def _type_name(binding: AclBinding) -> str:
    restype = _resource_type_of(binding)
    return _TYPE_NAMES.get(restype, restype.name)


def _filter(
    resource_type: ResourceType,
    name: str | None,
    pattern: ResourcePatternType,
    principal: str | None,
    host: str | None,
    operation: AclOperation,
    permission: AclPermissionType,
) -> AclBindingFilter:
    """A filter of ACL bindings; None matches any name, principal or host (as
    confluent-kafka's docs say, though its annotations take str only)."""
    return AclBindingFilter(
        resource_type,
        name,  # type: ignore[arg-type]
        pattern,
        principal,  # type: ignore[arg-type]
        host,  # type: ignore[arg-type]
        operation,
        permission,
    )


def _show(binding: AclBinding) -> str:
    return (
        f"(principal={binding.principal}, host={binding.host}, "
        f"operation={_operation_of(binding).name}, "
        f"permissionType={_permission_of(binding).name})"
    )


def _print_by_resource(bindings: list[AclBinding], title: str) -> None:
    by_resource: dict[tuple[str, str, str], list[AclBinding]] = {}
    for b in bindings:
        key = (_type_name(b), b.name, _pattern_type_of(b).name)
        by_resource.setdefault(key, []).append(b)
    for (rtype, name, pattern), items in sorted(by_resource.items()):
        print(
            f"{title} `ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern})`:"
        )
        for b in sorted(items, key=_show):
            print(f" \t{_show(b)} ")
        print()


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    _check_principals(args, parser)
    access = cluster_access(args)
    if not access.controllers:  # a broker that cannot be reached is named at once
        check_reachable(AdminClient(access.client_config()), access.bootstrap)
    if args.add:
        return _add(args, parser, access)
    if args.remove:
        return _remove(args, parser, access)
    return _list(args, access)


def _refused(code: ErrorCode, message: str | None) -> ToolError:
    return ToolError(f"{wire.error_name(code)}: {message or ''}".rstrip(": "))


# The names of a binding's parts in CreateAcls, and of a filter's in DescribeAcls and
# DeleteAcls, in the order of ``_on_the_wire``.
CREATION_FIELDS = (
    "resource_type",
    "resource_name",
    "resource_pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)
FILTER_FIELDS = (
    "resource_type_filter",
    "resource_name_filter",
    "pattern_type_filter",
    "principal_filter",
    "host_filter",
    "operation",
    "permission_type",
)


def _on_the_wire(binding: AclBinding, names: tuple[str, ...]) -> dict[str, Any]:
    """A binding or filter as the fields ``names`` of a request, in Kafka's codes."""
    values = (
        i8(int(_resource_type_of(binding).value)),
        binding.name,
        i8(int(_pattern_type_of(binding).value)),
        binding.principal,
        binding.host,
        i8(int(_operation_of(binding).value)),
        i8(int(_permission_of(binding).value)),
    )
    return dict(zip(names, values, strict=True))


def _binding(resource_type: int, name: str, pattern: int, acl: Any) -> AclBinding:
    """A binding of a response's resource and ACL entry."""
    return AclBinding(
        ResourceType(int(resource_type)),
        name,
        ResourcePatternType(int(pattern)),
        acl.principal,
        acl.host,
        AclOperation(int(acl.operation)),
        AclPermissionType(int(acl.permission_type)),
    )


def _pattern(args: argparse.Namespace, default: str) -> ResourcePatternType:
    return _PATTERNS[args.resource_pattern_type or default]


def _add(args: argparse.Namespace, parser: argparse.ArgumentParser, access: ClusterAccess) -> int:
    pattern = _pattern(args, "literal")
    if pattern not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        parser.error("--add takes --resource-pattern-type literal or prefixed")
    entries = _entries(args)
    if not entries:
        parser.error("--add needs --allow-principal or --deny-principal")
    operations = _operations_for(args, parser)
    if not operations:
        parser.error("--add needs a resource: --topic, --group, --transactional-id or --cluster")
    bindings = [
        AclBinding(
            rtype,
            name,
            ResourcePatternType.LITERAL if rtype == CLUSTER else pattern,
            principal,
            host,
            op,
            permission,
        )
        for (rtype, name), ops in operations.items()
        for principal, host, permission in entries
        for op in ops
    ]
    request = create_acls.CreateAclsRequest(
        creations=tuple(
            create_acls.AclCreation(**_on_the_wire(b, CREATION_FIELDS)) for b in bindings
        )
    )
    for result in access.send(request, "add ACLs").results:
        if result.error_code != ErrorCode.none:
            raise _refused(result.error_code, result.error_message)
    _print_by_resource(bindings, "Adding ACLs for resource")
    return 0


def _remove(
    args: argparse.Namespace, parser: argparse.ArgumentParser, access: ClusterAccess
) -> int:
    pattern = _pattern(args, "literal")
    resources = _resources(args)
    if not resources:
        parser.error("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args)
    filters: list[AclBindingFilter] = []
    if entries:
        operations = _operations_for(args, parser)
        for (rtype, name), ops in operations.items():
            for principal, host, permission in entries:
                for op in ops:
                    filters.append(_filter(rtype, name, pattern, principal, host, op, permission))
    else:  # no principal: every ACL of the resources
        for rtype, name in resources:
            filters.append(
                _filter(rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
            )
    if not args.force and sys.stdin.isatty():
        answer = input("Are you sure you want to remove ACLs? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            return 0
    request = delete_acls.DeleteAclsRequest(
        filters=tuple(
            delete_acls.DeleteAclsFilter(**_on_the_wire(f, FILTER_FIELDS)) for f in filters
        )
    )
    removed: list[AclBinding] = []
    for result in access.send(request, "remove ACLs").filter_results:
        if result.error_code != ErrorCode.none:
            raise _refused(result.error_code, result.error_message)
        for match in result.matching_acls:
            binding = _binding(match.resource_type, match.resource_name, match.pattern_type, match)
            if binding not in removed:
                removed.append(binding)
    _print_by_resource(removed, "Removed ACLs for resource")
    return 0


def _list(args: argparse.Namespace, access: ClusterAccess) -> int:
    pattern = _pattern(args, "any")
    resources: list[tuple[ResourceType, str | None]] = [*_resources(args)] or [
        (ResourceType.ANY, None)
    ]
    principals = args.principal or [None]
    found: list[AclBinding] = []
    for rtype, name in resources:
        for principal in principals:
            wanted = _filter(
                rtype, name, pattern, principal, None, AclOperation.ANY, AclPermissionType.ANY
            )
            request = describe_acls.DescribeAclsRequest(**_on_the_wire(wanted, FILTER_FIELDS))
            response = access.send(request, "list ACLs")
            if response.error_code != ErrorCode.none:
                raise _refused(response.error_code, response.error_message)
            for resource in response.resources:
                for acl in resource.acls:
                    binding = _binding(
                        resource.resource_type, resource.resource_name, resource.pattern_type, acl
                    )
                    if binding not in found:
                        found.append(binding)
    if wants_json(args):
        emit_json(args, [_as_json(b) for b in sorted(found, key=_sort_key)])
    else:
        _print_by_resource(found, "Current ACLs for resource")
    return 0


def _sort_key(binding: AclBinding) -> tuple[str, ...]:
    return (_type_name(binding), binding.name, _show(binding))


def _as_json(binding: AclBinding) -> dict[str, str]:
    return {
        "resource_type": _type_name(binding),
        "resource_name": binding.name,
        "pattern_type": _pattern_type_of(binding).name,
        "principal": binding.principal,
        "host": binding.host,
        "operation": _operation_of(binding).name,
        "permission_type": _permission_of(binding).name,
    }
