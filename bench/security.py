"""The cost of TLS and SASL: produce and consume over PLAINTEXT, SSL and SASL_SSL in one
run against one broker, and SCRAM authentications per second.

Starts a broker with three listeners (a throwaway CA made with the openssl command, as
the tests make it; SCRAM-SHA-512 credentials added with the AdminClient), then, rounds
alternated so that drift on the shared machine hits every listener alike:
  - produces N records of 100 B with confluent-kafka (acks=1, linger 5 ms, 1 MB batches)
    and consumes them back (fetch.queue.backoff.ms 10), once per listener per round;
  - produces records of 100 B one per request (linger 0, one record a batch) for a few
    seconds over PLAINTEXT and SSL: requests per second and the broker's CPU per request,
    the cost of TLS where requests are small;
  - opens connections and authenticates with SCRAM-SHA-512 (SaslHandshake and the two
    SaslAuthenticate round trips) over SASL_PLAINTEXT and over SASL_SSL, counting
    completed authentications per second, with the broker's CPU time per one.
Prints one line per figure (medians of the rounds). Usage:
  python bench/security.py [--records N] [--rounds R] [--handshakes H] [--small-seconds S]
"""

from __future__ import annotations

import argparse
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess, free_port  # noqa: E402
from tls_certs import make_ca  # noqa: E402

from strom.protocol.framing import codec_for, encode_request  # noqa: E402
from strom.security.sasl import SCRAM_SHA_512, ScramClient  # noqa: E402

RECORD = b"x" * 100
USER, PASSWORD = "bench", "bench-secret"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


def client_settings(name: str, ports: dict[str, int], ca: Path) -> dict:
    settings: dict = {"bootstrap.servers": f"127.0.0.1:{ports[name]}"}
    if name in ("SSL", "SASL_SSL"):
        settings |= {"security.protocol": name, "ssl.ca.location": str(ca)}
    if name == "SASL_SSL":
        settings |= {
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        }
    return settings


def produce(settings: dict, topic: str, count: int) -> float:
    delivered = 0

    def on_delivery(error, _message) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1

    producer = Producer(
        settings
        | {
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    assert delivered == count, f"{count - delivered} records not acknowledged"
    return count / elapsed


def small_requests(settings: dict, topic: str, seconds: float, pid: int) -> tuple[float, float]:
    """(acknowledged records a second, broker CPU ms per request) with one record per
    Produce request."""
    delivered = 0

    def on_delivery(error, _message) -> None:
        nonlocal delivered
        if error is None:
            delivered += 1

    producer = Producer(
        settings | {"acks": "1", "linger.ms": 0, "batch.num.messages": 1, "max.in.flight": 5}
    )
    producer.produce(topic, RECORD, on_delivery=on_delivery)
    producer.flush(30)  # connected and warm
    delivered = 0
    cpu = broker_cpu_s(pid)
    started = time.perf_counter()
    produced = 0
    while time.perf_counter() - started < seconds:
        if produced - delivered < 50:
            producer.produce(topic, RECORD, on_delivery=on_delivery)
            produced += 1
        producer.poll(0 if produced - delivered < 50 else 0.001)
    producer.flush(30)
    elapsed = time.perf_counter() - started
    cpu_ms = (broker_cpu_s(pid) - cpu) * 1000
    assert delivered == produced, f"{produced - delivered} records not acknowledged"
    return delivered / elapsed, cpu_ms / delivered


def consume(settings: dict, topic: str, count: int) -> float:
    consumer = Consumer(
        settings
        | {
            "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            "queued.min.messages": 1_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, first = 0, 0.0
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        got = sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
        if got and not seen:
            first = time.perf_counter()
        seen += got
    elapsed = time.perf_counter() - first
    consumer.close()
    assert seen >= count, f"read {seen} of {count}"
    return count / elapsed


def _request(sock: socket.socket, correlation: int, body) -> object:
    from kio.serial import entity_reader

    sock.sendall(encode_request(correlation, "bench", body))
    size = struct.unpack(">i", _read(sock, 4))[0]
    frame = _read(sock, size)
    codec = codec_for(type(body).__api_key__, type(body).__version__)
    offset = 5 if codec.flexible_response_header else 4
    return entity_reader(codec.response_type)(frame, offset)[0]


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return bytes(data)


def authenticate(port: int, tls: ssl.SSLContext | None) -> None:
    """One connection, SaslHandshake and SCRAM-SHA-512's two SaslAuthenticate round trips."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
    try:
        handshake = _request(sock, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert handshake.error_code == 0, handshake
        client = ScramClient(SCRAM_SHA_512, USER, PASSWORD)
        first = _request(sock, 2, SaslAuthenticateRequest(auth_bytes=client.first()))
        assert first.error_code == 0, first
        final = _request(
            sock, 3, SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes))
        )
        assert final.error_code == 0, final
        client.verify(final.auth_bytes)
    finally:
        sock.close()


def broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def handshakes(port: int, tls: ssl.SSLContext | None, count: int, pid: int) -> tuple:
    cpu = broker_cpu_s(pid)
    started = time.perf_counter()
    for _ in range(count):
        authenticate(port, tls)
    elapsed = time.perf_counter() - started
    return count / elapsed, (broker_cpu_s(pid) - cpu) / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--small-seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ca = make_ca(root / "ca")
        server = ca.issue("server", "/CN=localhost")
        broker = BrokerProcess(root / "data")
        ports = {
            "PLAINTEXT": broker.port,
            "SSL": free_port(),
            "SASL_PLAINTEXT": free_port(),
            "SASL_SSL": free_port(),
        }
        broker.overrides.update(
            {
                "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                "ssl.keystore.location": str(server.bundle),
                "ssl.truststore.location": str(ca.cert),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            }
        )
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            upsert = UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
            )
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(15)
            produced: dict[str, list[float]] = {name: [] for name in LISTENERS}
            consumed: dict[str, list[float]] = {name: [] for name in LISTENERS}
            for round_ in range(args.rounds):
                for name in LISTENERS:
                    topic = f"bench-{name.lower()}-{round_}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    settings = client_settings(name, ports, ca.cert)
                    produced[name].append(produce(settings, topic, args.records))
                    consumed[name].append(consume(settings, topic, args.records))
            base_p = statistics.median(produced["PLAINTEXT"])
            base_c = statistics.median(consumed["PLAINTEXT"])
            for name in LISTENERS:
                p, c = statistics.median(produced[name]), statistics.median(consumed[name])
                print(
                    f"{name:<10} produce 100 B: {p:>11,.0f} records/s ({p / base_p:.2f}x), "
                    f"consume: {c:>11,.0f} records/s ({c / base_c:.2f}x)  "
                    f"[rounds: {', '.join(f'{v / 1000:.0f}k' for v in produced[name])} / "
                    f"{', '.join(f'{v / 1000:.0f}k' for v in consumed[name])}]"
                )
            tls = ssl.create_default_context(cafile=str(ca.cert))
            assert broker.proc is not None
            small: dict[str, list[tuple[float, float]]] = {"PLAINTEXT": [], "SSL": []}
            for round_ in range(args.rounds):
                for name in small:
                    topic = f"bench-small-{name.lower()}-{round_}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    settings = client_settings(name, ports, ca.cert)
                    small[name].append(
                        small_requests(settings, topic, args.small_seconds, broker.proc.pid)
                    )
            base = statistics.median(rate for rate, _ in small["PLAINTEXT"])
            for name, rounds in small.items():
                rate = statistics.median(r for r, _ in rounds)
                cpu_ms = statistics.median(c for _, c in rounds)
                print(
                    f"{name:<10} one 100 B record per Produce request: {rate:>8,.0f} requests/s "
                    f"({rate / base:.2f}x), broker CPU {cpu_ms * 1000:.0f} µs per request"
                )
            for name, context in (("SASL_PLAINTEXT", None), ("SASL_SSL", tls)):
                rate, cpu_ms = handshakes(ports[name], context, args.handshakes, broker.proc.pid)
                print(
                    f"SCRAM-SHA-512 authentications over {name}: {rate:,.0f}/s, "
                    f"broker CPU {cpu_ms:.2f} ms each (4,096 iterations)"
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
