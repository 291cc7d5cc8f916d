"""ACL authorization with the semantics of Kafka's StandardAuthorizer, sans-I/O.

Owns the ACL vocabulary (resource, pattern, operation and permission types with Kafka's
codes), ``AclBinding`` and ``AclBindingFilter`` (what CreateAcls, DescribeAcls and
DeleteAcls carry, and how a filter matches a binding), and ``StandardAuthorizer``: an
index of bindings answering ``authorize(principal, host, operation, type, name)``.

Rules, as Kafka's: a super user (``super.users``, exact principal strings) may do
anything. Otherwise the ACLs that apply to a resource are the LITERAL ones naming it, the
LITERAL ones naming ``*`` and the PREFIXED ones whose name starts the resource's name;
of those, the ones whose principal is the caller's or ``User:*`` and whose host is the
caller's or ``*`` count. A matching DENY (on the operation or ALL) wins; else a matching
ALLOW grants (on the operation, ALL, or an operation implying it: READ, WRITE, DELETE and
ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). With no ACL at all on the
resource, ``allow.everyone.if.no.acl.found`` decides; with some, the answer is no.

Lookups are by resource type, then a dict of literal names and a dict of prefixes probed
at each distinct prefix length, so a call costs a handful of dict lookups however many
ACLs there are. Does not own where the ACLs come from (the metadata image) or sockets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation

# An ALLOW on the key also allows these operations.
IMPLIED_BY: dict[int, frozenset[int]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}

# The operations each resource type has (what authorized-operation bitfields report).
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


class InvalidAcl(ValueError):
    """A binding that cannot be stored (unknown or ANY types, an empty name, ...)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def validate(self) -> None:
        """Raise ``InvalidAcl`` unless Kafka would store this binding."""
        checks = (
            (self.resource_type, ResourceType, "resource type"),
            (self.pattern_type, PatternType, "pattern type"),
            (self.operation, AclOperation, "operation"),
            (self.permission, AclPermissionType, "permission type"),
        )
        for value, enum, what in checks:
            if value not in enum._value2member_map_ or value in (0, 1):
                raise InvalidAcl(f"Invalid {what} {value}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"Invalid pattern type {PatternType(self.pattern_type).name}")
        if not self.resource_name:
            raise InvalidAcl("Resource name should not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        principal_type, sep, _ = self.principal.partition(":")
        if not sep or not principal_type:
            raise InvalidAcl(f"Could not parse principal from `{self.principal}`")
        if not self.host:
            raise InvalidAcl("Invalid empty host")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for principal, host or name matches any; ANY for the enums matches any."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission: int = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == acl.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD_RESOURCE)
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != acl.pattern_type:
            return False
        return name is None or name == acl.resource_name

    def unknown_part(self) -> str | None:
        """What makes this filter invalid (an UNKNOWN element), or None."""
        for value, what in (
            (self.resource_type, "resource type"),
            (self.pattern_type, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:
                return f"Invalid {what}"
        return None


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class _TypeIndex:
    """The ACLs of one resource type: literal by name, prefixed by prefix."""

    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        self.prefix_lengths: list[int] = []

    def add(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type == PatternType.LITERAL else self.prefixed
        table.setdefault(acl.resource_name, []).append(acl)
        if table is self.prefixed:
            self._lengths()

    def remove(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type == PatternType.LITERAL else self.prefixed
        entries = table.get(acl.resource_name)
        if entries is None:
            return
        try:
            entries.remove(acl)
        except ValueError:
            return
        if not entries:
            del table[acl.resource_name]
            if table is self.prefixed:
                self._lengths()

    def _lengths(self) -> None:
        self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def matching(self, name: str) -> list[list[AclBinding]]:
        """The lists of ACLs that apply to the resource ``name``."""
        out = []
        literal = self.literal
        found = literal.get(name)
        if found:
            out.append(found)
        if name != WILDCARD_RESOURCE:
            found = literal.get(WILDCARD_RESOURCE)
            if found:
                out.append(found)
        prefixed = self.prefixed
        if prefixed:
            size = len(name)
            for length in self.prefix_lengths:
                if length > size:
                    break
                found = prefixed.get(name[:length])
                if found:
                    out.append(found)
        return out

    def __bool__(self) -> bool:
        return bool(self.literal or self.prefixed)


class StandardAuthorizer:
    """ACLs indexed for ``authorize``; bindings are added and removed by id."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_id: dict[object, AclBinding] = {}
        self._by_type: dict[int, _TypeIndex] = {}

    # Contents ----------------------------------------------------------------------

    def add(self, acl_id: object, acl: AclBinding) -> None:
        if acl_id in self._by_id:
            self.remove(acl_id)
        self._by_id[acl_id] = acl
        index = self._by_type.get(acl.resource_type)
        if index is None:
            index = self._by_type[acl.resource_type] = _TypeIndex()
        index.add(acl)

    def remove(self, acl_id: object) -> None:
        acl = self._by_id.pop(acl_id, None)
        if acl is not None:
            self._by_type[acl.resource_type].remove(acl)

    def load(self, acls: Iterable[tuple[object, AclBinding]]) -> None:
        """Replace every ACL with ``acls`` (id, binding)."""
        self._by_id.clear()
        self._by_type.clear()
        for acl_id, acl in acls:
            self.add(acl_id, acl)

    def ids(self) -> set[object]:
        return set(self._by_id)

    def bindings(self) -> list[AclBinding]:
        return list(self._by_id.values())

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [acl for acl in self._by_id.values() if acl_filter.matches(acl)]

    def __len__(self) -> int:
        return len(self._by_id)

    # Decisions ---------------------------------------------------------------------

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on the
        resource (see the module docstring for the rules)."""
        if principal in self.super_users:
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        groups = index.matching(name)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        implied = IMPLIED_BY.get(operation)
        allowed = False
        for group in groups:
            for acl in group:
                if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.host != host and acl.host != WILDCARD_HOST:
                    continue
                acl_op = acl.operation
                if acl.permission == AclPermissionType.DENY:
                    if acl_op == operation or acl_op == Op.ALL:
                        return False
                elif not allowed and (
                    acl_op == operation
                    or acl_op == Op.ALL
                    or (implied is not None and acl_op in implied)
                ):
                    allowed = True
        return allowed

    def authorized_operations(
        self, principal: str, host: str, resource_type: int, name: str
    ) -> list[int]:
        """The supported operations of the resource that ``authorize`` allows."""
        return [
            op
            for op in SUPPORTED_OPERATIONS.get(resource_type, ())
            if self.authorize(principal, host, op, resource_type, name)
        ]

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type (Kafka's
        authorizeByResourceType): some ALLOW pattern of the principal that no DENY of the
        principal covers, or no ACL of the type at all and allow.everyone.if.no.acl.found.
        """
        if principal in self.super_users:
            return True
        index = self._by_type.get(resource_type)
        if not index:
            return self.allow_everyone_if_no_acl_found
        implied = IMPLIED_BY.get(operation)

        def applies(acl: AclBinding) -> bool:
            return (acl.principal == principal or acl.principal == WILDCARD_PRINCIPAL) and (
                acl.host == host or acl.host == WILDCARD_HOST
            )

        deny_literal: set[str] = set()
        deny_prefixes: list[str] = []
        allows: list[AclBinding] = []
        for table in (index.literal, index.prefixed):
            for group in table.values():
                for acl in group:
                    if not applies(acl):
                        continue
                    op = acl.operation
                    if acl.permission == AclPermissionType.DENY:
                        if op == operation or op == Op.ALL:
                            if acl.pattern_type == PatternType.LITERAL:
                                deny_literal.add(acl.resource_name)
                            else:
                                deny_prefixes.append(acl.resource_name)
                    elif op == operation or op == Op.ALL or (implied and op in implied):
                        allows.append(acl)
        if WILDCARD_RESOURCE in deny_literal:
            return False
        for acl in allows:
            name = acl.resource_name
            if any(name.startswith(p) for p in deny_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            return True
        return False


def operations_bitfield(operations: Iterable[int]) -> int:
    """Kafka's encoding of authorized operations: bit N for operation code N."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits
