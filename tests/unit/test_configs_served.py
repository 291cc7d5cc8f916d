"""A broker config Strom accepts is one it honours: the Kafka-only ones (KAFKA_ONLY) are
refused at start and by AlterConfigs, naming the key, at a value Strom would not act on;
every other declared broker config is read somewhere in strom/; docs/operations.md lists
the Kafka-only ones. (The configs honoured as Kafka does are tested where they act, on
real brokers; the cleaner's load factor here, at the node that hands it to the cleaner.)"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from strom import config as config_module
from strom.cluster.node_state import NodeState
from strom.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    KAFKA_ONLY,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    check_dynamic_broker_config,
    render,
)

ROOT = Path(__file__).resolve().parents[2]


def refusal(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(props)
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "key, value",
    [
        ("sasl.kerberos.service.name", "kafka"),
        ("sasl.kerberos.min.time.before.relogin", "120000"),
        ("sasl.login.refresh.buffer.seconds", "120"),
        ("remote.fetch.max.wait.ms", "100"),
        ("metric.reporters", "com.example.Reporter"),
        ("principal.builder.class", "com.example.PrincipalBuilder"),
        ("ssl.provider", "SunJSSE"),
        ("ssl.trustmanager.algorithm", "SunX509"),
        ("max.connection.creation.rate", "10"),
        ("log.cleaner.threads", "0"),
        ("metadata.max.retention.ms", "-1"),
    ],
)
def test_a_value_strom_would_not_act_on_is_refused_naming_the_key(key: str, value: str) -> None:
    message = refusal({key: value})
    assert message.startswith(f"{key}={value} is refused: ")
    assert KAFKA_ONLY[key].why in message


def test_a_properties_file_with_one_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nsasl.kerberos.service.name=kafka\n")
    with pytest.raises(ConfigError, match=r"^sasl\.kerberos\.service\.name=kafka is refused"):
        BrokerConfig.load(str(path))
    with pytest.raises(ConfigError, match=r"^remote\.fetch\.max\.wait\.ms=1 is refused"):
        BrokerConfig.load(None, ["remote.fetch.max.wait.ms=1"])


def test_per_listener_forms_are_refused_too() -> None:
    message = refusal({"listener.name.plaintext.ssl.keymanager.algorithm": "PKIX"})
    assert message.startswith("listener.name.plaintext.ssl.keymanager.algorithm=PKIX is refused")


def test_kafkas_default_is_accepted_silently(caplog: pytest.LogCaptureFixture) -> None:
    props = {
        key: render(BROKER_CONFIGS[key].default)
        for key in KAFKA_ONLY
        if BROKER_CONFIGS[key].default is not None
    }
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig(props)  # type: ignore[arg-type]
    assert caplog.text == ""
    assert config["sasl.kerberos.min.time.before.relogin"] == 60000


@pytest.mark.parametrize(
    "key, value",
    [
        ("num.io.threads", "16"),
        ("num.network.threads", "8"),
        ("num.recovery.threads.per.data.dir", "1"),  # Kafka's sample server.properties
        ("log.cleaner.threads", "2"),
        ("ssl.protocol", "TLSv1.2"),
        ("metadata.max.retention.bytes", "0"),
    ],
)
def test_a_value_that_changes_nothing_is_accepted_with_a_warning(
    key: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert KAFKA_ONLY[key].accepts is not None
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig({key: value})
    assert config.is_set(key)
    [record] = caplog.records
    assert record.getMessage().startswith(f"{key}={value} is accepted and changes nothing: ")


def test_alter_configs_refuses_what_start_refuses() -> None:
    key = "sasl.kerberos.min.time.before.relogin"
    with pytest.raises(ConfigError, match=f"^{key}=120000 is refused"):
        check_dynamic_broker_config(key, "120000", per_broker=True)
    assert check_dynamic_broker_config(key, "60000", per_broker=True) == 60000
    assert check_dynamic_broker_config(key, None, per_broker=True) is None  # a delete
    assert check_dynamic_broker_config("num.io.threads", "16", per_broker=False) == 16
    with pytest.raises(ConfigError, match="^remote.fetch.max.wait.ms=1 is refused"):
        check_dynamic_broker_config("remote.fetch.max.wait.ms", "1", per_broker=False)
    prefixed = "listener.name.ssl.ssl.provider"
    with pytest.raises(ConfigError, match=f"^{prefixed}=SunJSSE is refused"):
        check_dynamic_broker_config(prefixed, "SunJSSE", per_broker=True)


def test_every_kafka_only_entry_is_a_declared_broker_config() -> None:
    assert set(KAFKA_ONLY) <= set(BROKER_CONFIGS)


def test_operations_doc_lists_every_kafka_only_config() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Kafka broker configs Strom does not serve") :]
    missing = [key for key in KAFKA_ONLY if f"`{key}`" not in section]
    assert not missing, missing


# Every declared broker config is read -----------------------------------------------------


def _string_reads() -> set[str]:
    """The string constants of strom/'s code that may name a config being read: all of
    them except a ConfigDef's own name, the members of config.py's set literals (the
    dynamic config tables) and KAFKA_ONLY's keys."""
    found: set[str] = set()
    for path in (ROOT / "strom").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        skipped: set[int] = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "ConfigDef"
                and node.args
            ):
                skipped.add(id(node.args[0]))
            if path.name == "config.py" and isinstance(node, ast.Set):
                skipped.update(id(element) for element in node.elts)
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "KAFKA_ONLY"
                and isinstance(node.value, ast.Dict)
            ):
                skipped.update(id(key) for key in node.value.keys)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skipped
            ):
                found.add(node.value)
    return found


def test_every_declared_broker_config_is_read_or_kafka_only() -> None:
    """A broker config declared and never read is accepted and not honoured. Each must be
    named in code that reads it (``config["key"]``, ``listener_value(l, "key")``...), be
    the broker default of a topic or group config, be read by a prefix the config module
    declares, or be in KAFKA_ONLY."""
    reads = _string_reads()
    synonyms = {d.broker_name for d in [*TOPIC_CONFIGS.values(), *GROUP_CONFIGS.values()]}
    prefixes = tuple(getattr(config_module, "HTTP_LISTENER_PREFIXES", {}))
    unread = [
        key
        for key in BROKER_CONFIGS
        if key not in reads
        and key not in synonyms
        and key not in KAFKA_ONLY
        and not (prefixes and key.startswith(prefixes))
    ]
    assert not unread, f"declared, never read, not in KAFKA_ONLY: {unread}"


def test_the_cleaners_offset_map_fills_to_the_load_factor(tmp_path: Path) -> None:
    """log.cleaner.io.buffer.load.factor: one cleaning indexes as many keys as the dedupe
    buffer holds (24 bytes a key) times the load factor, as Kafka's offset map does."""

    def entries(props: dict[str, str]) -> int:
        config = BrokerConfig({"log.dir": str(tmp_path / "data"), **props})
        return NodeState(config).logs.cleaner.max_map_entries

    assert entries({"log.cleaner.dedupe.buffer.size": "24000"}) == 900  # 0.9, Kafka's default
    loaded = {"log.cleaner.dedupe.buffer.size": "24000", "log.cleaner.io.buffer.load.factor": "0.5"}
    assert entries(loaded) == 500
