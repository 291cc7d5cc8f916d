"""The admin listener (``admin.listeners``) against real brokers: /metrics in the
Prometheus text format with Kafka's names, checked by Debian's ``promtool``; exact
counts of records and bytes produced and fetched; a group's lag as kafka_exporter
names it, seen rising and falling by a real Prometheus server scraping the node; the
health endpoints, readiness going from 503 to 200 as a broker's controller comes up;
a bad ``admin.listeners`` value refused in one line; /metrics behind basic
authentication, over http and over https (``admin.ssl.*``, a throwaway CA), where plain
http gets nothing, and bad TLS or authentication settings refused in one line.
``./dev test`` installs Debian's prometheus package (promtool and the server)."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, free_port
from cli_helpers import one_line_error, strom
from cluster_process import Cluster, NodeSpec
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tls_certs import make_ca

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match is not None, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    process = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data")
    process.overrides["admin.listeners"] = f"http://127.0.0.1:{process.extra_port('admin')}"
    # the time-based flush and the checkpoint files often (test_flush_and_checkpoint...)
    process.overrides["log.flush.scheduler.interval.ms"] = "50"
    process.overrides["log.flush.offset.checkpoint.interval.ms"] = "200"
    process.start()
    yield process, process.ports["admin"]
    if process.alive():
        process.stop()


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def produce(bootstrap: str, topic: str, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures: list[Any] = []
    for i in range(count):
        producer.produce(
            topic, b"v" * size, on_delivery=lambda e, _m: e is not None and failures.append(e)
        )
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0 and not failures


def test_metrics_count_what_was_produced_and_fetched(node: tuple[BrokerProcess, int]) -> None:
    process, port = node
    topic = new_topic(process.bootstrap, partitions=2)
    produce(process.bootstrap, topic, 3000)
    samples = scrape(port)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 3000
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert bytes_in is not None and 3000 * 100 < bytes_in < 3000 * 200
    log_size = sum(
        value(samples, "kafka_log_log_size", topic=topic, partition=str(p)) or 0 for p in (0, 1)
    )
    assert log_size == bytes_in  # every appended batch is in the logs, and nothing else
    consumer = Consumer(
        {"bootstrap.servers": process.bootstrap, "group.id": "m", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 3000 and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    consumer.close()
    assert seen == 3000
    samples = scrape(port)
    bytes_out = value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert bytes_out == bytes_in  # read once, exactly
    produces = sum(
        v
        for (name, labels), v in samples.items()
        if name == "kafka_network_requestmetrics_requests_total"
        and ("request", "Produce") in labels
    )
    assert produces >= 1
    p99 = value(
        samples, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99"
    )
    assert p99 is not None and p99 > 0
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    with socket.create_connection(("127.0.0.1", process.port)):
        connections = wait_for(
            lambda: value(
                scrape(port), "kafka_server_socketservermetrics_connections", listener="PLAINTEXT"
            ),
            10,
            "the open connection to be counted",
        )
    assert connections >= 1


def test_the_event_loop_lag_histogram(node: tuple[BrokerProcess, int]) -> None:
    """The loop's lag, sampled every 10 ms: a Prometheus histogram whose count grows
    while the node runs, and its worst lag since start."""
    _, port = node
    before = scrape(port)
    time.sleep(0.3)
    after = scrape(port)
    name = "strom_event_loop_lag_seconds"
    count = value(after, f"{name}_count")
    assert count is not None and count > (value(before, f"{name}_count") or 0) + 5
    assert value(after, f"{name}_bucket", le="+Inf") == count
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (sample, labels), v in after.items()
        if sample == f"{name}_bucket"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    worst = value(after, "strom_event_loop_lag_max_seconds")
    assert worst is not None and 0 <= worst < 60


def test_flush_and_checkpoint_keep_up_with_a_time_based_flush(
    node: tuple[BrokerProcess, int],
) -> None:
    """flush.ms: the fsync thread flushes the log within moments of the appends and the
    recovery-point checkpoint file (written on that thread too) says so."""
    process, _ = node
    name = f"m-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={"flush.ms": "100"})])[name].result(15)
    produce(process.bootstrap, name, 500)
    checkpoint = process.data_dir / "recovery-point-offset-checkpoint"
    deadline = time.monotonic() + 30
    recovery_point = None
    while time.monotonic() < deadline:
        lines = checkpoint.read_text().splitlines() if checkpoint.exists() else []
        points = {line.split()[0]: int(line.split()[2]) for line in lines[2:]}
        recovery_point = points.get(name)
        if recovery_point == 500:
            break
        time.sleep(0.1)
    assert recovery_point == 500


def test_a_consumer_reads_cold_segments_warmed_on_a_thread(
    node: tuple[BrokerProcess, int],
) -> None:
    """Segments whose pages are not in the page cache: the fetch reads them into it on a
    thread (counted in strom_fetch_cold_reads_total) and the consumer gets every record,
    in order, as written."""
    process, port = node
    topic = new_topic(process.bootstrap)
    count, size = 6000, 1000  # about 6 MB: mapped reads and pread windows both
    producer = Producer({"bootstrap.servers": process.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, (b"%08d" % i) * (size // 8))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    evicted = False
    for path in (process.data_dir / f"{topic}-0").glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            probe = bytearray(1)
            try:
                os.preadv(fd, [probe], 0, os.RWF_NOWAIT)
            except BlockingIOError:
                evicted = True
        finally:
            os.close(fd)
    assert evicted, "the page cache kept the segment: nothing to test here"
    before = value(scrape(port), "strom_fetch_cold_reads_total") or 0
    consumer = Consumer(
        {
            "bootstrap.servers": process.bootstrap,
            "group.id": f"cold-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                seen.append(message.value())
    consumer.close()
    assert seen == [(b"%08d" % i) * (size // 8) for i in range(count)]
    assert (value(scrape(port), "strom_fetch_cold_reads_total") or 0) > before


def test_promtool_accepts_the_metrics(node: tuple[BrokerProcess, int]) -> None:
    process, port = node
    produce(process.bootstrap, new_topic(process.bootstrap), 10)
    _, text = http_get(f"http://127.0.0.1:{port}/metrics")
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert "kafka_server_brokertopicmetrics_messagesin_total" in text


def test_health(node: tuple[BrokerProcess, int]) -> None:
    _, port = node
    status, body = http_get(f"http://127.0.0.1:{port}/health/live")
    assert status == 200 and json.loads(body)["status"] == "live"
    status, body = http_get(f"http://127.0.0.1:{port}/health/ready")
    ready = json.loads(body)
    assert status == 200 and ready["status"] == "ready", ready
    assert all(ready["checks"].values())


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "strom-dashboard.json"


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_uses_only_served_metrics(node: tuple[BrokerProcess, int]) -> None:
    _, port = node
    _, text = http_get(f"http://127.0.0.1:{port}/metrics")
    served = set()  # every family the node declares (a family may have no sample yet)
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        suffixes = {"summary": ["", "_count", "_sum"]}.get(kind, [""])
        served |= {family + suffix for suffix in suffixes}
    used = {
        name
        for expr in dashboard_queries()
        for name in re.findall(r"\b((?:kafka|process)_[a-z_]+)\b", expr)
    }
    assert used and used <= served, used - served


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()


def test_prometheus_sees_a_groups_lag_rise_and_fall(
    node: tuple[BrokerProcess, int], tmp_path: Path
) -> None:
    process, port = node
    topic = new_topic(process.bootstrap)
    group = f"lag-{uuid.uuid4().hex[:6]}"
    produce(process.bootstrap, topic, 100)
    commit(process.bootstrap, group, topic, 20)
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: strom\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "wb"),
    )
    query = urllib.parse.quote(f'kafka_consumergroup_lag{{consumergroup="{group}"}}')

    def lag() -> float | None:
        try:
            status, body = http_get(f"http://127.0.0.1:{web_port}/api/v1/query?query={query}")
        except (TimeoutError, urllib.error.URLError, ConnectionError):
            return None
        result = json.loads(body)["data"]["result"] if status == 200 else []
        return float(result[0]["value"][1]) if result else None

    try:
        wait_for(lambda: lag() == 80, 60, "Prometheus to see a lag of 80")
        produce(process.bootstrap, topic, 50)
        wait_for(lambda: lag() == 130, 30, "the lag to rise to 130")
        commit(process.bootstrap, group, topic, 150)
        wait_for(lambda: lag() == 0, 30, "the lag to fall to 0")
        # Every query of the Grafana dashboard is one Prometheus takes.
        for expr in dashboard_queries():
            query = urllib.parse.quote(expr.replace("$job", ".*").replace("$instance", ".*"))
            status, body = http_get(f"http://127.0.0.1:{web_port}/api/v1/query?query={query}")
            assert status == 200 and json.loads(body)["status"] == "success", (expr, body)
    finally:
        server.terminate()
        server.wait(30)


def test_readiness_waits_for_the_controller(tmp_path: Path) -> None:
    """A broker whose controller is not up answers live but not ready (503, saying
    why); once the controller is up and has unfenced it, ready."""
    cluster = Cluster(tmp_path, [NodeSpec(1, "controller"), NodeSpec(2, "broker")])
    broker_node = cluster.nodes[2]
    broker_node.properties["admin.listeners"] = "http://127.0.0.1:0"  # it logs the port bound
    try:
        broker_node.launch()
        bound = wait_for(
            lambda: re.search(r"admin listener on http://[^:]+:(\d+)", broker_node.output()),
            30,
            "the admin listener's port",
        )
        admin_port = int(bound.group(1))

        def answered() -> tuple[int, str] | None:
            try:
                return http_get(f"http://127.0.0.1:{admin_port}/health/ready")
            except (urllib.error.URLError, ConnectionError):
                return None

        status, body = wait_for(answered, 30, "the admin listener")
        assert status == 503, body
        assert json.loads(body)["checks"]["registered_and_unfenced"] is False
        assert http_get(f"http://127.0.0.1:{admin_port}/health/live")[0] == 200
        cluster.nodes[1].start()
        wait_for(lambda: (answered() or (0, ""))[0] == 200, 60, "the broker to be ready")
    finally:
        cluster.kill_all()


def test_a_bad_admin_listener_is_one_line(tmp_path: Path) -> None:
    result = strom(
        "broker",
        "--override",
        f"log.dirs={tmp_path / 'data'}",
        "--override",
        "admin.listeners=127.0.0.1:9644",
        timeout=60,
    )
    assert result.returncode == 2
    assert "admin.listeners" in one_line_error(result)


def admin_status(
    url: str,
    user: str | None = None,
    password: str = "",
    context: ssl.SSLContext | None = None,
) -> int:
    """The status of a GET of the admin listener's ``url`` (a /metrics answer checked to
    be the metrics, a 401 to carry a basic challenge)."""
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            body = response.read().decode()
            assert not url.endswith("/metrics") or "kafka_server" in body
            return response.status
    except urllib.error.HTTPError as refusal:
        if refusal.code == 401:
            assert "Basic" in refusal.headers.get("WWW-Authenticate", "")
        return refusal.code


def test_metrics_behind_basic_authentication(tmp_path: Path) -> None:
    """admin.authentication.method=BASIC: /metrics (which names every topic and group)
    only for a known user with a role; the health checks stay open for probes."""
    users = tmp_path / "admin-users"
    users.write_text("prometheus: scrape-secret,metrics\nvisitor: visitor-secret,guest\n")
    process = BrokerProcess(tmp_path / "data")
    port = process.extra_port("admin")
    process.overrides.update(
        {
            "admin.listeners": f"http://127.0.0.1:{port}",
            "admin.authentication.method": "BASIC",
            "admin.authentication.users.file": str(users),
            "admin.authentication.roles": "metrics",
        }
    )
    process.start()
    try:
        url = f"http://127.0.0.1:{process.ports['admin']}"
        assert admin_status(f"{url}/metrics") == 401
        assert admin_status(f"{url}/metrics", "prometheus", "wrong") == 401
        assert admin_status(f"{url}/metrics", "visitor", "visitor-secret") == 403
        assert admin_status(f"{url}/metrics", "prometheus", "scrape-secret") == 200
        assert admin_status(f"{url}/health/live") == 200
    finally:
        process.stop()


def test_metrics_over_https_behind_basic_authentication(tmp_path: Path) -> None:
    """admin.listeners=https://... with admin.ssl.keystore.location: /metrics over TLS
    (the server checked against the test CA), 401 without credentials and 200 with;
    plain http on that port gets no answer."""
    ca = make_ca(tmp_path / "pki")
    server = ca.issue("admin", "/CN=admin")
    users = tmp_path / "admin-users"
    users.write_text("prometheus: scrape-secret,metrics\n")
    process = BrokerProcess(tmp_path / "data")
    port = process.extra_port("admin")
    process.overrides.update(
        {
            "admin.listeners": f"https://127.0.0.1:{port}",
            "admin.ssl.keystore.location": str(server.bundle),
            "admin.authentication.method": "BASIC",
            "admin.authentication.users.file": str(users),
            "admin.authentication.roles": "metrics",
        }
    )
    process.start()
    try:
        port = process.ports["admin"]
        assert f"admin listener on https://127.0.0.1:{port}" in process.logs()
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=str(ca.cert))
        assert admin_status(f"{url}/metrics", context=trusted) == 401
        assert admin_status(f"{url}/metrics", "prometheus", "wrong", context=trusted) == 401
        assert admin_status(f"{url}/metrics", "prometheus", "scrape-secret", trusted) == 200
        assert admin_status(f"{url}/health/ready", context=trusted) == 200
        with pytest.raises(urllib.error.URLError) as untrusted:  # not the system's CAs
            admin_status(f"{url}/health/live", context=ssl.create_default_context())
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            admin_status(f"http://127.0.0.1:{port}/metrics", "prometheus", "scrape-secret")
    finally:
        process.stop()


def test_basic_authentication_without_users_is_one_line(tmp_path: Path) -> None:
    result = strom(
        "broker",
        "--override",
        f"log.dirs={tmp_path / 'data'}",
        "--override",
        "admin.listeners=http://127.0.0.1:0",
        "--override",
        "admin.authentication.method=BASIC",
        timeout=60,
    )
    assert result.returncode == 2
    assert "admin.authentication.users.file" in one_line_error(result)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["admin.listeners=http://127.0.0.1:0", "admin.ssl.keystore.location=/x"],
         "admin.ssl.* settings need an https:// listener"),
        (["admin.listeners=https://127.0.0.1:0"], "admin.ssl.keystore.location: a TLS listener"),
        (["admin.listeners=https://127.0.0.1:0", "admin.ssl.keystore.location=/nope"],
         "admin.ssl.keystore.location: cannot read /nope"),
        (["admin.listeners=https://127.0.0.1:0", "admin.ssl.client.authentication=ALWAYS"],
         "admin.ssl.client.authentication"),
    ],
)  # fmt: skip
def test_bad_admin_tls_settings_are_one_line(
    tmp_path: Path, settings: list[str], expected: str
) -> None:
    overrides = [arg for setting in settings for arg in ("--override", setting)]
    result = strom("broker", "--override", f"log.dirs={tmp_path / 'data'}", *overrides, timeout=60)
    assert expected in one_line_error(result, code=2)
