"""Every request on a controller listener is authorized, as Kafka's controller does.

A single node (a quorum of one) with the authorizer on, `allow.everyone.if.no.acl.found`
off and `User:admin` its only super user; its client listener takes SASL PLAIN and
SCRAM, and its controller listener is PLAINTEXT, as `config/server.properties` maps it,
so whoever reaches that port is `User:ANONYMOUS`. The node's own requests to its
controller are made inside the process and need no rights.

An anonymous client on the controller listener, attacking as an outside audit did:

- CreateAcls granting itself ALL on the cluster, DeleteAcls of every ACL,
  AlterUserScramCredentials setting `admin`'s password, AlterClientQuotas: each refused
  with CLUSTER_AUTHORIZATION_FAILED, and the admin, on the client listener, sees nothing
  changed. Once the admin grants `User:ANONYMOUS` ALTER on the cluster, its CreateAcls
  there is served: the refusal comes from the ACLs, not from the port.
- DescribeConfigs and IncrementalAlterConfigs of a topic (served on the controller
  listener for `--bootstrap-controller`, KIP-919) refused with
  TOPIC_AUTHORIZATION_FAILED, the topic's configs unchanged; and the tools given
  `--bootstrap-controller` stop at their first request (DescribeCluster, which needs
  ALTER on the cluster there) with one line.
- every other API the controller listener serves (but ApiVersions and the SASL
  handshake, which precede authentication) refused with CLUSTER_AUTHORIZATION_FAILED,
  a request of each built at its highest version (the config APIs naming a broker).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from broker_process import BrokerProcess, with_controller_listener
from cli_helpers import one_line_error, strom
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka_helpers import wait_until
from kio.schema.alter_client_quotas.v1 import request as quotas
from kio.schema.alter_user_scram_credentials.v0 import request as scram
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from raw_client import RawClient

from strom.broker.handler_tables import route_tables
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for

NODE = 1
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)
REFUSED = ErrorCode.cluster_authorization_failed
EVERYTHING = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)
# Served before authentication, as Kafka serves them on any listener.
UNAUTHENTICATED = {17, 18, 36}
# Attacked one by one below, with their effects checked.
ADMIN_APIS = {30, 31, 49, 51}
# In the sweep of every API their resources name this node's broker.
CONFIG_APIS = {32, 44}
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    process = BrokerProcess(tmp_path_factory.mktemp("controller-authz") / "data")
    with_controller_listener(process, NODE)
    process.overrides.update(
        {
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": "User:admin",
        }
    )
    process.start()
    try:
        yield process, process.ports["CONTROLLER"]
    finally:
        process.stop()


@pytest.fixture(scope="module")
def admin(node: tuple[BrokerProcess, int]) -> AdminClient:
    process, _ = node
    return AdminClient(
        {
            "bootstrap.servers": process.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
    )


def anonymous(port: int, request: Any) -> Any:
    with RawClient(port) as client:
        return client.request(request)


def cluster_acl(principal: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def grant_all_to_anonymous() -> Any:
    return create_acls.CreateAclsRequest(
        creations=(
            create_acls.AclCreation(
                resource_type=4,  # CLUSTER
                resource_name="kafka-cluster",
                resource_pattern_type=3,  # LITERAL
                principal="User:ANONYMOUS",
                host="*",
                operation=2,  # ALL
                permission_type=3,  # ALLOW
            ),
        )
    )


def acls_of(admin: AdminClient) -> list[AclBinding]:
    return list(admin.describe_acls(EVERYTHING, request_timeout=10).result(15))


def test_anonymous_cannot_grant_itself_the_cluster(
    node: tuple[BrokerProcess, int], admin: AdminClient
) -> None:
    _, port = node
    before = acls_of(admin)
    answer = anonymous(port, grant_all_to_anonymous())
    assert [r.error_code for r in answer.results] == [REFUSED]
    assert acls_of(admin) == before


def test_anonymous_cannot_delete_acls(node: tuple[BrokerProcess, int], admin: AdminClient) -> None:
    _, port = node
    kept = cluster_acl("User:alice", AclOperation.DESCRIBE)
    admin.create_acls([kept])[kept].result(15)
    wait_until(lambda: kept in acls_of(admin), 10, "the admin's ACL")
    answer = anonymous(
        port,
        delete_acls.DeleteAclsRequest(
            filters=(
                delete_acls.DeleteAclsFilter(
                    resource_type_filter=1,  # ANY
                    resource_name_filter=None,
                    pattern_type_filter=1,  # ANY
                    principal_filter=None,
                    host_filter=None,
                    operation=1,  # ANY
                    permission_type=1,  # ANY
                ),
            )
        ),
    )
    assert [r.error_code for r in answer.filter_results] == [REFUSED]
    assert all(not r.matching_acls for r in answer.filter_results)
    assert kept in acls_of(admin)


def test_anonymous_cannot_set_a_users_scram_password(
    node: tuple[BrokerProcess, int], admin: AdminClient
) -> None:
    _, port = node
    answer = anonymous(
        port,
        scram.AlterUserScramCredentialsRequest(
            deletions=(),
            upsertions=(
                scram.ScramCredentialUpsertion(
                    name="admin",
                    mechanism=2,  # SCRAM-SHA-256
                    iterations=4096,
                    salt=b"attacker-salt",
                    salted_password=b"\x01" * 32,
                ),
            ),
        ),
    )
    assert [(r.user, r.error_code) for r in answer.results] == [("admin", REFUSED)]
    described = admin.describe_user_scram_credentials(["admin"])
    with pytest.raises(Exception, match="(?i)not found|RESOURCE_NOT_FOUND"):
        described["admin"].result(15)
    # The admin may (the check is the ACLs', not the port's): its own upsertion works.
    upsert = UserScramCredentialUpsertion(
        "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"admin-scram"
    )
    admin.alter_user_scram_credentials([upsert])["admin"].result(15)


def test_anonymous_cannot_set_client_quotas(node: tuple[BrokerProcess, int]) -> None:
    _, port = node
    answer = anonymous(
        port,
        quotas.AlterClientQuotasRequest(
            entries=(
                quotas.EntryData(
                    entity=(quotas.EntityData(entity_type="user", entity_name="alice"),),
                    ops=(quotas.OpData(key="producer_byte_rate", value=1.0, remove=False),),
                ),
            ),
            validate_only=False,
        ),
    )
    assert [e.error_code for e in answer.entries] == [REFUSED]


def test_anonymous_cannot_read_or_change_a_topics_configs(
    node: tuple[BrokerProcess, int], admin: AdminClient
) -> None:
    _, port = node
    topic = "configs-at-the-controller"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    described = anonymous(
        port,
        describe_configs.DescribeConfigsRequest(
            resources=(
                describe_configs.DescribeConfigsResource(
                    resource_type=RESOURCE_TOPIC, resource_name=topic, configuration_keys=None
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        ),
    )
    assert [(r.error_code, r.configs) for r in described.results] == [
        (ErrorCode.topic_authorization_failed, ())
    ]
    altered = anonymous(
        port,
        alter_configs.IncrementalAlterConfigsRequest(
            resources=(
                alter_configs.AlterConfigsResource(
                    resource_type=RESOURCE_TOPIC,
                    resource_name=topic,
                    configs=(
                        alter_configs.AlterableConfig(
                            name="retention.ms", config_operation=0, value="1"
                        ),
                    ),
                ),
            ),
            validate_only=False,
        ),
    )
    assert [r.error_code for r in altered.responses] == [ErrorCode.topic_authorization_failed]
    resource = ConfigResource("topic", topic)
    retention = admin.describe_configs([resource])[resource].result(15)["retention.ms"]
    assert retention.value == "604800000"
    # The tools stop at their first request, in one line.
    controller = f"127.0.0.1:{port}"
    with ThreadPoolExecutor(2) as pool:
        refusals = list(
            pool.map(
                lambda args: strom(*args, "--bootstrap-controller", controller),
                [
                    ("configs", "--describe", "--entity-type", "topics", "--entity-name", topic),
                    ("acls", "--list"),
                ],
            )
        )
    for refusal in refusals:
        assert "CLUSTER_AUTHORIZATION_FAILED" in one_line_error(refusal, 1)


def test_the_refusal_follows_the_acls(node: tuple[BrokerProcess, int], admin: AdminClient) -> None:
    """Granted ALTER on the cluster, the anonymous client's CreateAcls is served."""
    _, port = node
    grant = cluster_acl("User:ANONYMOUS", AclOperation.ALTER)
    admin.create_acls([grant])[grant].result(15)
    try:
        served: list[Any] = []

        def granted() -> bool:
            served[:] = [anonymous(port, grant_all_to_anonymous())]
            return served[0].results[0].error_code == ErrorCode.none

        wait_until(granted, 10, "the ALTER grant to reach the controller's authorizer")
        assert cluster_acl("User:ANONYMOUS", AclOperation.ALL) in acls_of(admin)
    finally:
        # Both deletions committed before the anonymous client asks again: a CreateAcls
        # of its authorized before they were would grant it all once more.
        for binding in (grant, cluster_acl("User:ANONYMOUS", AclOperation.ALL)):
            wanted = binding_filter(binding)
            admin.delete_acls([wanted])[wanted].result(15)
    wait_until(
        lambda: anonymous(port, grant_all_to_anonymous()).results[0].error_code == REFUSED,
        10,
        "the grant to be gone",
    )
    admin.delete_acls([binding_filter(cluster_acl("User:ANONYMOUS", AclOperation.ALL))])


def binding_filter(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


# Every other API of the controller listener ------------------------------------------


def _some(kind: Any) -> Any:
    """A value of ``kind`` (a kio field type) for a request that names one of each thing."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return None  # an optional field
    if origin is tuple:
        (element, _) = typing.get_args(kind)
        return (_some(element),) if dataclasses.is_dataclass(element) else ()
    if dataclasses.is_dataclass(kind):
        return _build(kind)
    # kio's field types are phantom subclasses of the builtins (i32, TopicName...):
    # plain values of the builtin do.
    for builtin, value in (
        (bool, False),
        (int, 1),
        (float, 0.0),
        (str, "a"),
        (bytes, b""),
        (uuid.UUID, uuid.UUID(int=1)),
        (datetime.timedelta, datetime.timedelta(milliseconds=10)),
    ):
        if isinstance(kind, type) and issubclass(kind, builtin):
            return value
    if kind is datetime.datetime:
        return datetime.datetime.now(datetime.UTC)
    raise TypeError(f"no value for {kind!r}")


def _build(cls: type) -> Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        if not has_default:
            values[field.name] = _some(hints[field.name])
    return cls(**values)


def _error_codes(value: Any) -> Iterator[ErrorCode]:
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == "error_code":
                yield item
            else:
                yield from _error_codes(item)
    elif isinstance(value, tuple):
        for item in value:
            yield from _error_codes(item)


CONTROLLER_APIS = sorted(
    (key, route.max_version)
    for key, route in route_tables()[1].items()
    if key not in UNAUTHENTICATED | ADMIN_APIS
)


@pytest.mark.parametrize(("api_key", "version"), CONTROLLER_APIS, ids=lambda v: str(v))
def test_every_controller_api_refuses_an_anonymous_client(
    node: tuple[BrokerProcess, int], api_key: int, version: int
) -> None:
    _, port = node
    request = _build(codec_for(api_key, version).request_type)
    if api_key == 1:  # the metadata log's Fetch: name its partition
        topic = request.topics[0]
        request = dataclasses.replace(
            request,
            topics=(
                dataclasses.replace(
                    topic,
                    topic_id=uuid.UUID(int=1),
                    partitions=(dataclasses.replace(topic.partitions[0], partition=0),),
                ),
            ),
        )
    if api_key in CONFIG_APIS:
        request = dataclasses.replace(
            request,
            resources=tuple(
                dataclasses.replace(r, resource_type=RESOURCE_BROKER, resource_name=str(NODE))
                for r in request.resources
            ),
        )
    answer = anonymous(port, request)
    codes = list(_error_codes(answer))
    assert REFUSED in codes, f"API {api_key} v{version} answered {codes}"
    assert ErrorCode.none not in codes, f"API {api_key} v{version} served part: {codes}"
