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


PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)
DELAY_MS = 3000
IDLE_MS = 1500


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("idle") / "data",
        {
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": str(DELAY_MS),
            "connections.max.idle.ms": str(IDLE_MS),
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_a_failed_login_is_answered_late_and_others_are_served_meanwhile(
    sasl_broker: BrokerProcess,
) -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from strom.protocol.framing import encode_request

    guesser = RawClient(sasl_broker.port)
    try:
        assert guesser.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        guesser.send_bytes(
            encode_request(99, "guess", SaslAuthenticateRequest(auth_bytes=b"\0admin\0wrong"))
        )
        guesser.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # not answered yet: 0.5 s into a 3 s delay
            guesser.sock.recv(1)
        with RawClient(sasl_broker.port) as other:  # the broker serves others meanwhile
            handshake = other.request(SaslHandshakeRequest(mechanism="PLAIN"))
            assert handshake.error_code == ErrorCode.none
        guesser.sock.settimeout(30)
        frame = guesser.read_frame()  # the refusal comes, then the connection closes
        assert frame
        assert guesser.is_closed_by_peer()
    finally:
        guesser.close()


def test_idle_connections_are_closed_and_busy_ones_kept(sasl_broker: BrokerProcess) -> None:
    idle = RawClient(sasl_broker.port)
    busy = RawClient(sasl_broker.port)
    idle.sock.settimeout(0.5)
    try:
        for _ in range(60):  # at most about 30 s
            try:
                if idle.sock.recv(1) == b"":
                    break  # closed by the broker
            except TimeoutError:
                pass
            assert served(busy)  # asked every half second: never idle
        else:
            raise AssertionError("an idle connection was never closed")
        assert served(busy)
    finally:
        idle.close()
        busy.close()


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def bounded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("frames") / "data",
        {"queued.max.request.bytes": str(8 * 1024 * 1024)},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_frames_declared_and_not_sent_cost_no_memory(bounded_broker: BrokerProcess) -> None:
    """Twenty connections each declare a 100 MiB frame and send a little of it: the
    broker's memory does not grow by what they declared, and it serves others."""
    assert bounded_broker.proc is not None
    before = rss_bytes(bounded_broker.proc.pid)
    declared = []
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", bounded_broker.port))
            sock.sendall((100 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 65536)
            declared.append(sock)
        with RawClient(bounded_broker.port) as other:
            assert served(other)
        grown = rss_bytes(bounded_broker.proc.pid) - before
        assert grown < 200 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB"
    finally:
        for sock in declared:
            sock.close()
    with RawClient(bounded_broker.port) as other:  # and after they are gone
        assert served(other)


def test_quiet_and_trickling_connections_cost_little_memory(tmp_path) -> None:
    """A thousand connections that say nothing, and a hundred that declare a 1 MB
    request and send a few bytes of it (slowloris), on a broker with no limits set:
    its memory grows by far less than a receive buffer or a declared frame each would
    take (256 MiB and 100 MiB), and it serves another client meanwhile."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # for this process and the broker it starts
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    process = BrokerProcess(tmp_path / "data")
    process.start()
    held = []
    try:
        assert process.proc is not None
        before = rss_bytes(process.proc.pid)
        for i in range(1100):
            sock = socket.create_connection(("127.0.0.1", process.port))
            if i >= 1000:
                sock.sendall((1_000_000).to_bytes(4, "big") + b"\0" * 100)
            held.append(sock)
        with RawClient(process.port) as other:
            assert served(other)
        grown = rss_bytes(process.proc.pid) - before
        assert grown < 64 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB"
    finally:
        for sock in held:
            sock.close()
        process.stop()


def test_max_connections_bounds_the_client_connections(tmp_path) -> None:
    """max.connections=3: three connections are served, the next ones closed, and one
    more taken once one goes."""
    process = BrokerProcess(tmp_path / "data", {"max.connections": "3"})
    process.start()
    held: list[RawClient] = []
    try:
        held = [RawClient(process.port) for _ in range(3)]
        assert all(served(c) for c in held)
        extra = [socket.create_connection(("127.0.0.1", process.port)) for _ in range(3)]
        assert all(closed_by_the_broker(s) for s in extra)
        for s in extra:
            s.close()
        held.pop().close()
        wait_until(lambda: _one_more_is_served(process, held), 10, "a connection taken again")
    finally:
        for client in held:
            client.close()
        process.stop()
