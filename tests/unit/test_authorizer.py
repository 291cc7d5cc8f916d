"""StandardAuthorizer: Kafka's ACL semantics, checked case by case and against a naive
reference implementation with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAcl,
    PatternType,
    ResourceType,
    StandardAuthorizer,
    operations_bitfield,
    parse_super_users,
)

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE, BOB = "User:alice", "User:bob"


def acl(
    name: str = "t",
    op: int = Op.READ,
    perm: int = ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: int = LIT,
    rtype: int = TOPIC,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, **kwargs: object) -> StandardAuthorizer:
    a = StandardAuthorizer(**kwargs)  # type: ignore[arg-type]
    for i, binding in enumerate(acls):
        a.add(i, binding)
    return a


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not authorizer().authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "t")
    a = authorizer(allow_everyone_if_no_acl_found=True)
    assert a.authorize(ALICE, "1.2.3.4", Op.READ, TOPIC, "t")


def test_acls_on_the_resource_for_someone_else_deny_even_with_allow_everyone() -> None:
    a = authorizer(acl(principal=BOB), allow_everyone_if_no_acl_found=True)
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert a.authorize(BOB, "h", Op.READ, TOPIC, "t")
    # Another topic has no ACL at all.
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "other")


def test_literal_allow_and_operation_match() -> None:
    a = authorizer(acl())
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert not a.authorize(ALICE, "h", Op.WRITE, TOPIC, "t")
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t2")
    assert not a.authorize(ALICE, "h", Op.READ, GROUP, "t")
    assert not a.authorize(BOB, "h", Op.READ, TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_implied_describe(granted: int) -> None:
    a = authorizer(acl(op=granted))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")


def test_alter_configs_implies_describe_configs_not_the_reverse() -> None:
    a = authorizer(acl(op=Op.ALTER_CONFIGS))
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, TOPIC, "t")
    b = authorizer(acl(op=Op.DESCRIBE_CONFIGS))
    assert not b.authorize(ALICE, "h", Op.ALTER_CONFIGS, TOPIC, "t")
    c = authorizer(acl(op=Op.DESCRIBE))
    assert not c.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_deny_does_not_imply() -> None:
    # A DENY READ does not deny DESCRIBE.
    a = authorizer(acl(op=Op.ALL), acl(op=Op.READ, perm=DENY))
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")


def test_all_implies_everything_and_deny_wins() -> None:
    a = authorizer(acl(op=Op.ALL))
    for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS, Op.DESCRIBE, Op.DELETE):
        assert a.authorize(ALICE, "h", op, TOPIC, "t")
    a.add("deny", acl(op=Op.ALL, perm=DENY, principal="User:*"))
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_wildcard_principal_host_and_resource() -> None:
    a = authorizer(acl(name="*", principal="User:*", host="10.0.0.1"))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "anything")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "anything")
    # As in Kafka, User:* stands for every principal, whatever its type.
    assert a.authorize("Group:x", "10.0.0.1", Op.READ, TOPIC, "anything")


def test_prefixed() -> None:
    a = authorizer(acl(name="orders-", pattern=PRE), acl(name="orders-secret", perm=DENY))
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "orders-eu")
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "orders-")
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "orders")
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "orders-secret")
    # A prefixed "*" is a literal prefix, not a wildcard.
    b = authorizer(acl(name="*", pattern=PRE))
    assert not b.authorize(ALICE, "h", Op.READ, TOPIC, "x")
    assert b.authorize(ALICE, "h", Op.READ, TOPIC, "*x")


def test_super_users() -> None:
    assert parse_super_users("User:admin; User:ops;") == {"User:admin", "User:ops"}
    a = authorizer(acl(op=Op.ALL, perm=DENY, principal="User:*"), super_users={"User:admin"})
    assert a.authorize("User:admin", "h", Op.WRITE, TOPIC, "t")
    assert not a.authorize(ALICE, "h", Op.WRITE, TOPIC, "t")


def test_remove_and_replace() -> None:
    a = authorizer(acl(), acl(name="p", pattern=PRE))
    a.remove(0)
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "px")
    a.remove(1)
    assert len(a) == 0
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "px")
    a.load([("x", acl())])
    assert a.ids() == {"x"}
    a.remove("nope")


def test_authorized_operations_bitfield() -> None:
    a = authorizer(acl(op=Op.WRITE))
    ops = a.authorized_operations(ALICE, "h", TOPIC, "t")
    assert set(ops) == {Op.WRITE, Op.DESCRIBE}
    assert operations_bitfield(ops) == (1 << 4) | (1 << 8)


def test_authorize_any() -> None:
    a = authorizer(acl(name="t", op=Op.WRITE))
    assert a.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not a.authorize_any(BOB, "h", Op.WRITE, TOPIC)
    a.add("d", acl(name="*", op=Op.WRITE, perm=DENY))
    assert not a.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    b = authorizer(acl(name="ab", op=Op.WRITE), acl(name="a", pattern=PRE, perm=DENY, op=Op.ALL))
    assert not b.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_any(ALICE, "h", Op.WRITE, 2)
    assert authorizer(super_users={ALICE}).authorize_any(ALICE, "h", Op.WRITE, TOPIC)


def test_validate() -> None:
    acl().validate()
    bad = [
        acl(name=""),
        acl(pattern=PatternType.MATCH),
        acl(op=Op.ANY),
        acl(perm=AclPermissionType.ANY),
        acl(rtype=ResourceType.ANY),
        acl(principal="alice"),
        acl(rtype=CLUSTER, name="c"),
        acl(op=99),
    ]
    for binding in bad:
        with pytest.raises(InvalidAcl):
            binding.validate()
    acl(rtype=CLUSTER, name="kafka-cluster", op=Op.CLUSTER_ACTION).validate()


def test_filters() -> None:
    lit, pre, star = acl(name="orders"), acl(name="ord", pattern=PRE), acl(name="*")
    everything = AclBindingFilter()
    assert all(everything.matches(b) for b in (lit, pre, star))
    match = AclBindingFilter(resource_name="orders", pattern_type=PatternType.MATCH)
    assert match.matches(lit) and match.matches(pre) and match.matches(star)
    assert not match.matches(acl(name="x"))
    literal = AclBindingFilter(resource_name="orders", pattern_type=LIT)
    assert literal.matches(lit) and not literal.matches(star) and not literal.matches(pre)
    by_any = AclBindingFilter(resource_name="ord", pattern_type=PatternType.ANY)
    assert by_any.matches(pre) and not by_any.matches(lit)
    assert not AclBindingFilter(principal=BOB).matches(lit)
    assert not AclBindingFilter(operation=Op.WRITE).matches(lit)
    assert not AclBindingFilter(permission=DENY).matches(lit)
    assert not AclBindingFilter(host="1.1.1.1").matches(lit)
    assert not AclBindingFilter(resource_type=GROUP).matches(lit)
    assert AclBindingFilter(operation=0).unknown_part() == "Invalid operation"
    assert everything.unknown_part() is None
    a = authorizer(lit, pre, star)
    assert set(a.describe(match)) == {lit, pre, star}


# Reference implementation ------------------------------------------------------------


def reference(
    acls: list[AclBinding],
    supers: set[str],
    allow_everyone: bool,
    principal: str,
    host: str,
    op: int,
    rtype: int,
    name: str,
) -> bool:
    if principal in supers:
        return True

    def on_resource(a: AclBinding) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == LIT:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    relevant = [a for a in acls if on_resource(a)]
    if not relevant:
        return allow_everyone
    mine = [a for a in relevant if a.principal in (principal, "User:*") and a.host in (host, "*")]
    if any(a.permission == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    implications = {
        Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
    }
    return any(
        a.permission == ALLOW
        and (a.operation in (op, Op.ALL) or a.operation in implications.get(op, ()))
        for a in mine
    )


names = st.sampled_from(["", "a", "ab", "abc", "b", "ba", "*", "*a"])
ops = st.sampled_from(
    [
        Op.ALL,
        Op.READ,
        Op.WRITE,
        Op.DESCRIBE,
        Op.ALTER,
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
        Op.DELETE,
    ]
)
principals = st.sampled_from([ALICE, BOB, "User:*", "Group:x"])
hosts = st.sampled_from(["*", "1.1.1.1", "2.2.2.2"])
bindings = st.builds(
    AclBinding,
    st.sampled_from([TOPIC, GROUP]),
    names.filter(bool),
    st.sampled_from([LIT, PRE]),
    principals,
    hosts,
    ops,
    st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(bindings, max_size=12),
    removed=st.sets(st.integers(0, 11), max_size=4),
    supers=st.sets(principals.filter(lambda p: p != "User:*"), max_size=1),
    allow_everyone=st.booleans(),
    principal=principals.filter(lambda p: p != "User:*"),
    host=hosts.filter(lambda h: h != "*"),
    op=ops.filter(lambda o: o != Op.ALL),
    rtype=st.sampled_from([TOPIC, GROUP]),
    name=names.filter(bool),
)
def test_matches_reference(
    acls: list[AclBinding],
    removed: set[int],
    supers: set[str],
    allow_everyone: bool,
    principal: str,
    host: str,
    op: int,
    rtype: int,
    name: str,
) -> None:
    a = StandardAuthorizer(supers, allow_everyone)
    for i, binding in enumerate(acls):
        a.add(i, binding)
    for i in removed:
        a.remove(i)
    kept = [b for i, b in enumerate(acls) if i not in removed]
    expected = reference(kept, supers, allow_everyone, principal, host, op, rtype, name)
    assert a.authorize(principal, host, op, rtype, name) == expected


@settings(max_examples=200, deadline=None)
@given(
    acls=st.lists(bindings, max_size=10),
    rtype=st.sampled_from([ResourceType.ANY, TOPIC]),
    name=st.none() | names.filter(bool),
    pattern=st.sampled_from(list(PatternType)[1:]),
    principal=st.none() | principals,
)
def test_filter_matches_reference(
    acls: list[AclBinding], rtype: int, name: str | None, pattern: int, principal: str | None
) -> None:
    f = AclBindingFilter(rtype, name, pattern, principal)
    for b in acls:
        expected = (
            (rtype == ResourceType.ANY or b.resource_type == rtype)
            and (principal is None or b.principal == principal)
            and (
                name is None
                or (
                    pattern == PatternType.MATCH
                    and (
                        (b.pattern_type == LIT and b.resource_name in (name, "*"))
                        or (b.pattern_type == PRE and name.startswith(b.resource_name))
                    )
                )
                or (pattern == PatternType.ANY and b.resource_name == name)
                or (pattern == b.pattern_type and b.resource_name == name)
            )
            and (pattern in (PatternType.ANY, PatternType.MATCH) or b.pattern_type == pattern)
        )
        assert f.matches(b) == expected


def test_authorizer_config() -> None:
    from strom.config import BrokerConfig, ConfigError

    config = BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    assert config["allow.everyone.if.no.acl.found"] is False
    with pytest.raises(ConfigError, match="Unknown authorizer.class.name"):
        BrokerConfig({"authorizer.class.name": "com.example.Nope"})


def test_node_authorizer_follows_the_metadata_image() -> None:
    import uuid

    from strom.broker.access.node_authorizer import NodeAuthorizer
    from strom.cluster.image import MetadataImage
    from strom.cluster.records import (
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        decode_record,
        encode_record,
    )

    def record(name: str) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(
            id=uuid.uuid4(),
            resource_type=TOPIC,
            resource_name=name,
            pattern_type=LIT,
            principal=ALICE,
            host="*",
            operation=Op.READ,
            permission_type=ALLOW,
        )

    image = MetadataImage()
    node = NodeAuthorizer((), False)
    first, second = record("a"), record("b")
    image.apply(first, 0)
    assert node.sync(image).authorize(ALICE, "h", Op.READ, TOPIC, "a")
    image.apply(second, 1)
    image.apply(RemoveAccessControlEntryRecord(id=first.id), 2)
    authorizer = node.sync(image)
    assert not authorizer.authorize(ALICE, "h", Op.READ, TOPIC, "a")
    assert authorizer.authorize(ALICE, "h", Op.READ, TOPIC, "b")
    # A snapshot holds the ACLs, and an image rebuilt from it (a new object) is followed.
    records = [decode_record(encode_record(r)) for r in image.to_records()]
    rebuilt = MetadataImage.from_records(records, 2)
    assert rebuilt.acls == image.acls
    rebuilt.apply(RemoveAccessControlEntryRecord(id=second.id), 3)
    assert not node.sync(rebuilt).authorize(ALICE, "h", Op.READ, TOPIC, "b")
