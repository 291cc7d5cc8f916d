"""Client quotas end to end: AlterClientQuotas/DescribeClientQuotas on the wire and through
`strom configs`, kept across a restart and replicated to every node.

confluent-kafka (2.x) has no client quota admin API, so quotas are set with the CLI and
with raw requests. Connections are User:ANONYMOUS (PLAINTEXT); the tests tell clients
apart by client id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, tool
from cluster_process import Cluster
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_client_quotas.v0 import request as alter_v0
from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.describe_client_quotas.v1 import request as describe
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

MB = 1024 * 1024
EXACT, DEFAULT, ANY = 0, 1, 2


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def set_quotas(
    port: int,
    entity: dict[str, str | None],
    values: dict[str, float | None],
    validate_only: bool = False,
) -> Any:
    """AlterClientQuotas for one entity (a value None removes the key); the response."""
    entry = alter.EntryData(
        entity=tuple(alter.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=tuple(alter.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in values.items()),
    )
    with RawClient(port) as client:
        return client.request(
            alter.AlterClientQuotasRequest(entries=(entry,), validate_only=validate_only)
        )


def described(
    port: int, components: list[tuple[str, int, str | None]], strict: bool = False
) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    request = describe.DescribeClientQuotasRequest(
        components=tuple(
            describe.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
        ),
        strict=strict,
    )
    with RawClient(port) as client:
        response = client.request(request)
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def new_topic(bootstrap: str, partitions: int = 1, replicas: int = 1) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(15)
    return name


@pytest.fixture
def quotas_cleared(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker, with every quota a test set removed afterwards."""
    yield broker
    for entity, values in described(broker.port, []).items():
        set_quotas(broker.port, dict(entity), {key: None for key in values})


def test_alter_and_describe_on_the_wire(quotas_cleared: BrokerProcess) -> None:
    port = quotas_cleared.port
    settings = [
        ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 50.0}),
        ({"user": "alice", "client-id": "c1"}, {"consumer_byte_rate": 2048.0}),
        ({"user": None}, {"producer_byte_rate": 4096.0}),
        ({"client-id": None}, {"controller_mutation_rate": 0.5}),
    ]
    for entity, values in settings:
        response = set_quotas(port, entity, values)
        assert [e.error_code for e in response.entries] == [ErrorCode.none]
    alice = (("user", "alice"),)
    alice_c1 = (("client-id", "c1"), ("user", "alice"))
    assert described(port, [("user", EXACT, "alice")]) == {
        alice: {"producer_byte_rate": 1024.0, "request_percentage": 50.0},
        alice_c1: {"consumer_byte_rate": 2048.0},
    }
    assert described(port, [("user", EXACT, "alice")], strict=True).keys() == {alice}
    assert described(port, [("user", DEFAULT, None)]).keys() == {(("user", None),)}
    assert described(port, [("user", ANY, None)]).keys() == {alice, alice_c1}
    assert described(port, [("client-id", ANY, None)]).keys() == {alice_c1}
    assert len(described(port, [])) == 4
    # Remove one key, then the other: the entity goes once it has no quota left.
    set_quotas(port, {"user": "alice"}, {"request_percentage": None})
    assert described(port, [("user", EXACT, "alice")], strict=True) == {
        alice: {"producer_byte_rate": 1024.0}
    }
    set_quotas(port, {"user": "alice"}, {"producer_byte_rate": None})
    assert described(port, [("user", EXACT, "alice")], strict=True) == {}
    # validate_only checks and stores nothing; v0 of the request works as v1.
    response = set_quotas(port, {"client-id": "v"}, {"producer_byte_rate": 10.0}, True)
    assert response.entries[0].error_code == ErrorCode.none
    assert described(port, [("client-id", EXACT, "v")]) == {}
    with RawClient(port) as client:
        response = client.request(
            alter_v0.AlterClientQuotasRequest(
                entries=(
                    alter_v0.EntryData(
                        entity=(alter_v0.EntityData(entity_type="client-id", entity_name="v0"),),
                        ops=(alter_v0.OpData(key="producer_byte_rate", value=5.0, remove=False),),
                    ),
                ),
                validate_only=False,
            )
        )
    assert response.entries[0].error_code == ErrorCode.none
    assert described(port, [("client-id", EXACT, "v0")]) == {
        (("client-id", "v0"),): {"producer_byte_rate": 5.0}
    }


@pytest.mark.parametrize(
    ("entity", "values", "message"),
    [
        ({"user": "a"}, {"producer_bytes_rate": 10.0}, "Invalid configuration key"),
        ({"user": "a"}, {"producer_byte_rate": 10.5}, "must be a Long value"),
        ({"client-id": "a"}, {"consumer_byte_rate": -1.0}, "must be a positive number"),
        ({"group": "a"}, {"producer_byte_rate": 10.0}, "Unhandled client quota entity type"),
        ({"user": ""}, {"producer_byte_rate": 10.0}, "Empty user not supported"),
        ({}, {"producer_byte_rate": 10.0}, "Invalid empty client quota entity"),
    ],
)
def test_invalid_alterations_are_invalid_request(
    quotas_cleared: BrokerProcess, entity: dict, values: dict, message: str
) -> None:
    response = set_quotas(quotas_cleared.port, entity, values)
    (entry,) = response.entries
    assert entry.error_code == ErrorCode.invalid_request
    assert message in entry.error_message
    assert described(quotas_cleared.port, []) == {}


def test_describe_with_a_bad_filter_is_invalid_request(broker: BrokerProcess) -> None:
    request = describe.DescribeClientQuotasRequest(
        components=(describe.ComponentData(entity_type="user", match_type=EXACT, match=None),),
        strict=False,
    )
    with RawClient(broker.port) as client:
        response = client.request(request)
    assert response.error_code == ErrorCode.invalid_request
    assert response.error_message


def test_cli_alter_and_describe(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    result = ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "producer_byte_rate=1048576,consumer_byte_rate=2097152",
        )
    )
    assert "Completed updating config for user-principal 'bob'." in result.stdout
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "clients",
            "--entity-default",
            "--add-config",
            "request_percentage=200",
        )
    )
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--user",
            "bob",
            "--client",
            "app",
            "--add-config",
            "consumer_byte_rate=1000",
        )
    )
    shown = ok(
        tool(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "bob")
    ).stdout
    assert (
        "Quota configs for user-principal 'bob' are "
        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0" in shown
    )
    assert described(broker.port, [("client-id", DEFAULT, None)], strict=True) == {
        (("client-id", None),): {"request_percentage": 200.0}
    }
    shown = ok(tool(broker, "configs", "--describe", "--user", "bob", "--client", "app")).stdout
    assert (
        "Quota configs for user-principal 'bob', client-id 'app' are consumer_byte_rate=1000.0"
        in shown
    )
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--delete-config",
            "producer_byte_rate",
        )
    )
    assert described(broker.port, [("user", EXACT, "bob")], strict=True) == {
        (("user", "bob"),): {"consumer_byte_rate": 2097152.0}
    }
    error = one_line_error(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "producer_byte_rate=1.5",
        )
    )
    assert "Configuration producer_byte_rate must be a Long value" in error


def test_quotas_survive_a_restart(broker: BrokerProcess) -> None:
    set_quotas(broker.port, {"user": "kept", "client-id": None}, {"producer_byte_rate": 77.0})
    broker.restart()
    assert described(broker.port, [("user", EXACT, "kept")]) == {
        (("client-id", None), ("user", "kept")): {"producer_byte_rate": 77.0}
    }
    set_quotas(broker.port, {"user": "kept", "client-id": None}, {"producer_byte_rate": None})


def test_quotas_reach_every_node(tmp_path: Path) -> None:
    cluster = Cluster.combined(tmp_path / "cluster")
    try:
        cluster.start_all()
        nodes = cluster.brokers
        response = set_quotas(nodes[-1].port, {"user": None}, {"consumer_byte_rate": 20_000.0})
        assert response.entries[0].error_code == ErrorCode.none
        for node in nodes:
            wait_until(
                lambda n=node: (
                    described(n.port, [("user", DEFAULT, None)])
                    == {(("user", None),): {"consumer_byte_rate": 20_000.0}}
                ),
                15,
                f"the quota on node {node.bootstrap}",
            )
    finally:
        cluster.kill_all()
