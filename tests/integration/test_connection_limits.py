"""Connection limits on a real broker: max.connections.per.ip (and its overrides),
changed at run time as Kafka's dynamic broker configs are.

Connections are raw sockets from 127.0.0.1: the broker closes the ones past the limit
as soon as they are accepted (the socket reads end of file), keeps the others (they are
served), and takes a new one as soon as one goes. A bad overrides value is one line at
start.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from cli_helpers import one_line_error, strom
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafka_helpers import wait_until
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

LIMIT = 5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("limits") / "data",
        {"max.connections.per.ip": str(LIMIT)},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def closed_by_the_broker(sock: socket.socket) -> bool:
    """Whether the broker closed ``sock`` (it reads end of file within 2 s)."""
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def served(client: RawClient) -> bool:
    answer = client.request(
        ApiVersionsRequest(client_software_name="limits", client_software_version="1")
    )
    return answer.error_code == ErrorCode.none


def test_connections_past_the_per_ip_limit_are_closed(broker: BrokerProcess) -> None:
    held = [RawClient(broker.port) for _ in range(LIMIT)]
    try:
        assert all(served(c) for c in held)
        extra = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(10)]
        assert all(closed_by_the_broker(s) for s in extra)
        for s in extra:
            s.close()
        held.pop().close()  # one goes: a new one is taken
        wait_until(lambda: _one_more_is_served(broker, held), 10, "a connection taken again")
        assert all(served(c) for c in held)
    finally:
        for client in held:
            client.close()


def _one_more_is_served(broker: BrokerProcess, held: list[RawClient]) -> bool:
    client = RawClient(broker.port)
    try:
        if served(client):
            held.append(client)
            return True
    except OSError:
        pass
    client.close()
    return False


def test_the_limits_change_at_run_time(broker: BrokerProcess) -> None:
    """An override for 127.0.0.1 raises its limit while the broker runs."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1")
    resource.set_config("max.connections.per.ip.overrides", f"127.0.0.1:{LIMIT + 5}")
    admin.alter_configs([resource])[resource].result(15)
    held: list[RawClient] = []
    try:
        wait_until(lambda: _one_more_is_served(broker, held), 10, "the first")
        for _ in range(LIMIT + 2):  # the admin client's own connection counts too
            assert _one_more_is_served(broker, held)
    finally:
        for client in held:
            client.close()
        reset = ConfigResource(ResourceType.BROKER, "1")
        reset.set_config("max.connections.per.ip.overrides", "")
        admin.alter_configs([reset])[reset].result(15)


def test_a_bad_overrides_value_is_one_line() -> None:
    bad = strom("broker", "--override", "max.connections.per.ip.overrides=localhost")
    assert bad.returncode == 2
    assert "max.connections.per.ip.overrides" in one_line_error(bad)
