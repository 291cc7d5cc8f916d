"""The web console (``strom console``) against a real broker, looked at with Debian's
headless Chromium: what the browser renders (``--dump-dom``) is what is checked, and a
screenshot of each main page is kept in the test's temp dir (``screenshots/``).

A topic created through the console's form is listed; a produced JSON message shows in
the message browser; a group's lag shows exactly once its consumer has stopped, and
its chart once samples are taken; a config altered and a topic deleted through the
forms show; offsets reset through the form move the lag; Avro values are decoded with
the schema registry. Bad arguments are one line.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from broker_process import BrokerProcess, free_port
from cli_helpers import one_line_error, strom
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from service_process import ServiceProcess

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


class ConsoleProcess(ServiceProcess):
    def __init__(self, broker: BrokerProcess, shots: Path, registry: str) -> None:
        self.shots = shots
        super().__init__(
            ["console", "--bootstrap-server", broker.bootstrap, "--listener",
             "http://127.0.0.1:0", "--sample-interval", "0.5", "--schema-registry-url", registry]
        )  # fmt: skip
        assert self.banner.startswith("Strom console on"), self.banner
        self.port = int(self.url.rsplit(":", 1)[1])

    def dom(self, path: str, browser: bool = False) -> str:
        """The page: as Chromium renders it (its DOM), or as served (the pages are whole
        on the server, so the two agree; Chromium costs 2 s a page)."""
        if not browser:
            with urllib.request.urlopen(self.url + path, timeout=60) as response:
                return response.read().decode()
        done = subprocess.run(
            [*CHROMIUM, "--dump-dom", self.url + path], capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return done.stdout.decode()

    def text(self, path: str, browser: bool = False) -> str:
        page = re.sub(r"<style>.*?</style>", "", self.dom(path, browser), flags=re.S)
        return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", page)))

    def screenshot(self, path: str, name: str) -> Path:
        self.shots.mkdir(exist_ok=True)
        shot = self.shots / f"{name}.png"
        subprocess.run(
            [*CHROMIUM, f"--screenshot={shot}", "--window-size=1280,900", self.url + path],
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert shot.stat().st_size > 1000
        return shot

    def token(self) -> str:
        """The token the console's forms carry (read off a page, as the browser has it)."""
        found = re.search(r'name="csrf_token" value="([^"]+)"', self.dom("/topics"))
        assert found is not None, "no token in the console's forms"
        return found.group(1)

    def post(self, path: str, form: dict[str, str]) -> str:
        """Submit a form as the browser does; the page it is sent to afterwards."""
        data = urllib.parse.urlencode({**form, "csrf_token": self.token()}).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Origin": self.url})
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.url

    def refused(self, path: str, form: dict[str, str], headers: dict[str, str]) -> int:
        """The HTTP status of a POST the console must refuse."""
        data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(request, timeout=60)
        return refusal.value.code


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[str]:
    process = ServiceProcess(
        ["schema-registry", "--bootstrap-server", broker.bootstrap,
         "--listener", "http://127.0.0.1:0"]
    )  # fmt: skip
    yield process.url
    process.stop()


@pytest.fixture(scope="module")
def console(
    broker: BrokerProcess, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator:
    process = ConsoleProcess(broker, tmp_path_factory.mktemp("console") / "screenshots", registry)
    yield process
    process.stop()


def wait_for(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_a_topic_created_in_the_console_is_listed(console: ConsoleProcess) -> None:
    name = f"made-{uuid.uuid4().hex[:6]}"
    landed = console.post(
        "/topics", {"name": name, "partitions": "3", "replication": "1", "configs": ""}
    )
    assert landed.endswith(f"/topics/{name}?note=Created+topic+{name}")
    listed = console.text("/topics", browser=True)
    assert re.search(rf"{name} 3 1 0 ", listed), listed[:2000]
    console.screenshot("/topics", "topics")
    detail = console.text(f"/topics/{name}")
    assert re.search(r"Partitions partition leader replicas .* 0 1 1 1 0 0 ", detail), detail


def test_a_produced_message_appears_in_the_browser(
    console: ConsoleProcess, broker: BrokerProcess
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(topic, key=f"customer-{i % 3}", value=f'{{"order": {i}, "sku": "x{i}"}}')
    assert producer.flush(30) == 0
    shown = console.text(f"/topics/{topic}/messages?from=end&limit=5&format=json", browser=True)
    assert '"order": 29' in shown and '"order": 24' not in shown  # the last five
    keyed = console.text(f"/topics/{topic}/messages?from=beginning&key=customer-1&limit=100")
    assert keyed.count("customer-1") == 10 and "customer-0" not in keyed
    found = console.text(f"/topics/{topic}/messages?from=beginning&text=x17&limit=100")
    assert '"sku": "x17"' in found and '"sku": "x18"' not in found
    hexed = console.text(f"/topics/{topic}/messages?from=offset&at=0&limit=1&format=hex")
    assert "7b 22 6f 72 64 65 72 22" in hexed  # {"order"
    console.screenshot(f"/topics/{topic}/messages?from=beginning&limit=20", "messages")


def test_values_are_decoded_with_the_schema_registry(
    console: ConsoleProcess, broker: BrokerProcess, registry: str
) -> None:
    topic = f"avro-{uuid.uuid4().hex[:6]}"
    schema = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
    }
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry}), json.dumps(schema))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    context = SerializationContext(topic, MessageField.VALUE)
    producer.produce(topic, serializer({"sku": "lamp-7", "qty": 3}, context))
    assert producer.flush(30) == 0
    raw = console.text(f"/topics/{topic}/messages?from=beginning&format=text")
    assert "lamp-7" in raw and '"qty"' not in raw  # Avro's bytes, not JSON
    shown = console.text(f"/topics/{topic}/messages?from=beginning&format=registry")
    assert '"sku": "lamp-7"' in shown and '"qty": 3' in shown


def test_lag_shows_after_a_consumer_stops(console: ConsoleProcess, broker: BrokerProcess) -> None:
    topic, group = f"lagging-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic, value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 30
    while read < 13 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
            if read == 13:
                consumer.commit(message, asynchronous=False)
    consumer.close()
    assert read == 13
    groups = console.text("/groups", browser=True)
    assert re.search(rf"{group} EMPTY CLASSIC 1 7\b", groups), groups[:2000]
    page = wait_for(
        lambda: (dom := console.dom(f"/groups/{group}")) and "<polyline" in dom and dom,
        30,
        "the lag chart",
    )
    assert 'id="lag">7<' in page
    console.screenshot(f"/groups/{group}", "group")
    # Reset to the earliest offsets through the form: the whole topic is lag again.
    landed = console.post(f"/groups/{group}/reset", {"topic": topic, "to": "earliest"})
    assert "note=Offsets+reset" in landed
    assert 'id="lag">20<' in console.dom(f"/groups/{group}")


def test_share_groups_show_members_and_lag(console: ConsoleProcess, broker: BrokerProcess) -> None:
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", f"sg-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, value=f"job{i}")
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)
        ],
    )  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(10)
    consumer = ShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group,
         "share.acknowledgement.mode": "explicit"}
    )  # fmt: skip
    consumer.subscribe([topic])
    try:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in consumer.poll(0.5) if m.error() is None]
        assert len(got) == 10
        for message in got[:4]:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync(10)
        # Six records still held: not finished with. One member.
        page = console.text("/share-groups")
        assert re.search(rf"{group} Stable 1 1 6\b", page), page[:2000]
        assert re.search(rf"{group} {topic} 0 4 6\b", page), page[:2000]
    finally:
        consumer.close()


def test_alter_and_delete_through_the_forms(console: ConsoleProcess) -> None:
    name = f"short-{uuid.uuid4().hex[:6]}"
    console.post("/topics", {"name": name, "partitions": "1", "replication": "1"})
    console.post(f"/topics/{name}/configs", {"key": "retention.ms", "value": "60000"})
    assert re.search(r"retention\.ms 60000 set on the topic", console.text(f"/topics/{name}"))
    refused = console.post(f"/topics/{name}/configs", {"key": "retention.ms", "value": "soon"})
    assert "error=" in refused
    assert "INVALID_CONFIG" in console.text(
        urllib.parse.urlparse(refused).path + "?" + urllib.parse.urlparse(refused).query
    )
    wrong = console.post(f"/topics/{name}/delete", {"confirm": "not-the-name"})
    assert "error=" in wrong and name in console.text("/topics")
    console.post(f"/topics/{name}/delete", {"confirm": name})
    wait_for(lambda: name not in console.text("/topics"), 20, "the topic to go")
    cluster = console.text("/")
    assert re.search(r"\b1 brokers\b", cluster) and "(controller)" in cluster
    console.screenshot("/", "cluster")


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    bad = strom("console", "--listener", "localhost:80")
    assert bad.returncode == 2 and "--listener" in one_line_error(bad)
    unreachable = strom("console", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1
    assert "connection refused" in one_line_error(unreachable)


def test_unknown_pages_say_so(console: ConsoleProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(console.url + "/topics/no-such-topic", timeout=30)
    assert missing.value.code == 404
    assert "no topic" in missing.value.read().decode()
    # without --connect-url, the Connect page says how to name a worker and serves no action
    assert "start the console with --connect-url" in console.text("/connect")
    with pytest.raises(urllib.error.HTTPError) as no_worker:
        console.post("/connect/any/pause", {})
    assert no_worker.value.code == 404


def test_forms_from_other_sites_are_refused(console: ConsoleProcess) -> None:
    """Cross-site request forgery: without the forms' token, with another Origin (even
    with the token), from another site, or under a host name rebound to the console, a
    POST is refused and the topic stays."""
    name = f"kept-{uuid.uuid4().hex[:6]}"
    console.post("/topics", {"name": name, "partitions": "1", "replication": "1"})
    wait_for(lambda: name in console.text("/topics"), 20, "the topic")
    delete = f"/topics/{name}/delete"
    token = console.token()
    assert console.refused(delete, {"confirm": name}, {}) == 403
    assert console.refused(delete, {"confirm": name, "csrf_token": "guess"}, {}) == 403
    evil = {"Origin": "http://evil.example"}
    assert console.refused(delete, {"confirm": name, "csrf_token": token}, evil) == 403
    cross_site = {"Sec-Fetch-Site": "cross-site"}
    assert console.refused(delete, {"confirm": name, "csrf_token": token}, cross_site) == 403
    rebound = {"Host": f"evil.example:{console.port}"}
    assert console.refused(delete, {"confirm": name, "csrf_token": token}, rebound) == 403
    assert name in console.text("/topics")


def test_a_page_on_another_origin_cannot_delete_a_topic(
    console: ConsoleProcess, tmp_path: Path
) -> None:
    """The attack as a browser makes it: headless Chromium opens a page served from
    another origin whose form posts to the console's delete URL as soon as it loads."""
    import http.server
    import threading

    name = f"target-{uuid.uuid4().hex[:6]}"
    console.post("/topics", {"name": name, "partitions": "1", "replication": "1"})
    wait_for(lambda: name in console.text("/topics"), 20, "the topic")
    (tmp_path / "attack.html").write_text(
        f'<form id="f" method="post" action="{console.url}/topics/{name}/delete">'
        f'<input name="confirm" value="{name}"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    attacker = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path))
    )
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        page = f"http://127.0.0.1:{attacker.server_address[1]}/attack.html"
        done = subprocess.run(
            [*CHROMIUM, "--virtual-time-budget=5000", "--dump-dom", page],
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert "cross" in done.stdout.decode() or "origin" in done.stdout.decode()
    finally:
        attacker.shutdown()
    assert name in console.text("/topics")
