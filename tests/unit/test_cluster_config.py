"""Cluster configuration (roles, quorum, listeners) and meta.properties / formatting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom.cluster.meta_properties import (
    BOOTSTRAP_FILE,
    META_PROPERTIES,
    MetaProperties,
    MetaPropertiesError,
    check_cluster_id,
    describe_dirs,
    ensure_formatted,
    format_dirs,
    random_uuid,
    read_bootstrap,
    read_meta_properties,
    uuid_from_string,
)
from strom.config import (
    BrokerConfig,
    ConfigError,
    Listener,
    QuorumVoter,
    parse_listener,
    parse_protocol_map,
    parse_voters,
)

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"


def combined(node_id: int = 1, **extra: str) -> dict[str, str]:
    port = 9090 + 2 * node_id
    props = {
        "node.id": str(node_id),
        "controller.quorum.voters": VOTERS,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1}",
    }
    props.update(extra)
    return props


def error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    message = str(info.value)
    assert "\n" not in message
    return message


# Defaults -------------------------------------------------------------------------


def test_default_node_is_a_combined_quorum_of_itself() -> None:
    config = BrokerConfig()
    assert config["process.roles"] == ["broker", "controller"]
    assert config.process_roles == frozenset({"broker", "controller"})
    assert config.is_broker and config.is_controller
    assert config.quorum_voters == []
    assert config.voter_ids == frozenset({1})
    assert config.voter_addresses == {}
    assert config.listeners == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.client_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert config.controller_listeners == []
    assert config.controller_listener_names == ["CONTROLLER"]
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.metadata_log_dir == Path("./strom-data")
    assert config.security_protocol("CONTROLLER") == "PLAINTEXT"
    assert config.security_protocol("plaintext") == "PLAINTEXT"


def test_kafka_defaults_of_the_quorum_settings() -> None:
    config = BrokerConfig()
    expected = {
        "broker.session.timeout.ms": 9000,
        "broker.heartbeat.interval.ms": 2000,
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "metadata.log.max.record.bytes.between.snapshots": 20 * 1024 * 1024,
        "metadata.log.max.snapshot.interval.ms": 3600000,
        "metadata.log.segment.bytes": 1073741824,
        "broker.rack": None,
        "inter.broker.listener.name": None,
    }
    for key, value in expected.items():
        assert config[key] == value, key
    described = config.describe()
    assert described["process.roles"] == ("broker,controller", True)
    assert described["listener.security.protocol.map"][0] == (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
        "CONTROLLER:PLAINTEXT"
    )


def test_metadata_log_dir_defaults_to_the_first_log_dir(tmp_path: Path) -> None:
    config = BrokerConfig({"log.dirs": f"{tmp_path}/a,{tmp_path}/b"})
    assert config.log_dirs == [tmp_path / "a", tmp_path / "b"]
    assert config.metadata_log_dir == tmp_path / "a"
    config = BrokerConfig({"log.dirs": str(tmp_path), "metadata.log.dir": f"{tmp_path}/meta"})
    assert config.metadata_log_dir == tmp_path / "meta"


# Parsing --------------------------------------------------------------------------


def test_voters_parse_into_typed_entries() -> None:
    assert parse_voters(VOTERS) == [
        QuorumVoter(1, "127.0.0.1", 9093),
        QuorumVoter(2, "127.0.0.1", 9095),
        QuorumVoter(3, "127.0.0.1", 9097),
    ]
    assert parse_voters("7@[::1]:9093") == [QuorumVoter(7, "::1", 9093)]
    assert parse_voters("") == []


@pytest.mark.parametrize(
    "value, needle",
    [
        ("1@host", "port"),
        ("host:9093", "id@host:port"),
        ("x@host:9093", "voter id"),
        ("1@host:0", "port"),
        ("1@:9093", "host:port"),
        ("1@a:9093,1@b:9093", "twice"),
    ],
)
def test_bad_voters(value: str, needle: str) -> None:
    message = error({"controller.quorum.voters": value})
    assert "controller.quorum.voters" in message and needle in message


def test_listener_names_are_free_and_upper_cased() -> None:
    assert parse_listener("controller://:9093") == Listener("CONTROLLER", "", 9093)
    assert parse_listener("INTERNAL://[::1]:9094") == Listener("INTERNAL", "::1", 9094)
    with pytest.raises(ConfigError, match="NAME://host:port"):
        parse_listener("nonsense")


def test_protocol_map() -> None:
    assert parse_protocol_map("internal:plaintext,EXT:SSL") == {
        "INTERNAL": "PLAINTEXT",
        "EXT": "SSL",
    }
    assert "unknown security protocol" in error({"listener.security.protocol.map": "A:TLS"})
    assert "mapped twice" in error({"listener.security.protocol.map": "A:SSL,a:PLAINTEXT"})


# Accessors ------------------------------------------------------------------------


def test_combined_cluster_node() -> None:
    config = BrokerConfig(combined(2))
    assert config.voter_ids == frozenset({1, 2, 3})
    assert config.voter_addresses == {
        1: ("127.0.0.1", 9093),
        2: ("127.0.0.1", 9095),
        3: ("127.0.0.1", 9097),
    }
    assert config.controller_listeners == [Listener("CONTROLLER", "127.0.0.1", 9095)]
    assert config.client_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9094)]
    assert config.is_controller_listener("controller")
    assert not config.is_controller_listener("PLAINTEXT")


def test_inter_broker_listener_uses_the_advertised_address() -> None:
    config = BrokerConfig(
        {
            "listeners": "INTERNAL://:9094,EXTERNAL://:9092",
            "advertised.listeners": "INTERNAL://node1:9094,EXTERNAL://public:9092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "internal",
        }
    )
    assert config.inter_broker_listener_name == "INTERNAL"
    assert config.inter_broker_listener == Listener("INTERNAL", "node1", 9094)


def test_controller_only_and_broker_only_nodes() -> None:
    controller = BrokerConfig(
        {
            "process.roles": "controller",
            "controller.quorum.voters": VOTERS,
            "listeners": "CONTROLLER://127.0.0.1:9093",
        }
    )
    assert controller.is_controller and not controller.is_broker
    assert controller.client_listeners == []
    assert controller.inter_broker_listener is None
    broker = BrokerConfig(
        {"process.roles": "broker", "node.id": "100", "controller.quorum.voters": VOTERS}
    )
    assert broker.is_broker and not broker.is_controller
    assert broker.voter_ids == frozenset({1, 2, 3})
    bootstrap = BrokerConfig(
        {
            "process.roles": "broker",
            "node.id": "100",
            "controller.quorum.voters": VOTERS,
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093,[::1]:9095",
        }
    )
    assert bootstrap.quorum_bootstrap_servers == [("127.0.0.1", 9093), ("::1", 9095)]
    # Without the voters (a dynamic quorum, KIP-853), one readable line.
    with pytest.raises(ConfigError, match="Dynamic quorums .* are not served"):
        BrokerConfig(
            {
                "process.roles": "broker",
                "node.id": "100",
                "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            }
        )


def test_combined_node_alone_may_still_have_a_controller_listener() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"})
    assert config.voter_ids == frozenset({1})
    assert config.controller_listeners == [Listener("CONTROLLER", "", 9093)]


# Validation, as KafkaConfig does it -----------------------------------------------------


@pytest.mark.parametrize(
    "props, needle",
    [
        ({"process.roles": "broker,zookeeper"}, "Unknown process role 'zookeeper'"),
        ({"process.roles": "broker,broker"}, "Duplicate role"),
        ({"process.roles": ""}, "process.roles"),
        (combined(4), "node.id 4 must be one of the voters"),
        (
            {"controller.quorum.voters": VOTERS, "listeners": "PLAINTEXT://:9092"},
            "needs a listener named in controller.listener.names",
        ),
        ({"process.roles": "broker"}, "broker-only node needs controller.quorum.voters"),
        (
            {"process.roles": "broker", "controller.quorum.voters": VOTERS},
            "node.id 1 of a broker-only node must not be among the voters",
        ),
        (
            {
                "process.roles": "broker",
                "node.id": "9",
                "controller.quorum.voters": VOTERS,
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            },
            "must not appear in listeners of a broker-only node",
        ),
        (
            {
                "process.roles": "controller",
                "controller.quorum.voters": VOTERS,
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            },
            "controller-only node",
        ),
        (
            {"process.roles": "controller", "listeners": "PLAINTEXT://:9092"},
            "needs a listener named in controller.listener.names",
        ),
        ({"listeners": "INTERNAL://:9092"}, "Listener INTERNAL is not in"),
        ({"listeners": "SSL://:9093"}, "needs its key and certificate"),
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "different name"),
        ({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9092"}, "different port"),
        ({"advertised.listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "different name"),
        ({"inter.broker.listener.name": "OTHER"}, "inter.broker.listener.name OTHER"),
        (combined(1, **{"inter.broker.listener.name": "CONTROLLER"}), "must not be a controller"),
        ({"listeners": "CONTROLLER://:9093"}, "A broker needs a listener"),
    ],
)
def test_validation_is_one_readable_line(props: dict[str, str], needle: str) -> None:
    assert needle in error(props)


def test_port_zero_listeners_do_not_clash() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
    assert [lst.port for lst in config.parsed_listeners] == [0, 0]


# Cluster ids ----------------------------------------------------------------------


def test_random_uuid_is_kafkas_form() -> None:
    for _ in range(500):
        text = random_uuid()
        assert re.fullmatch(r"[A-Za-z0-9_]{22}", text), text
        assert uuid_from_string(text).int >= 100
        check_cluster_id(text)


@pytest.mark.parametrize("bad", ["", "short", "AAAAAAAAAAAAAAAAAAAAAA", "!" * 22, "A" * 23])
def test_bad_cluster_ids(bad: str) -> None:
    with pytest.raises(ConfigError):
        check_cluster_id(bad)


# meta.properties and formatting ---------------------------------------------------------


def node(tmp_path: Path, **extra: str) -> BrokerConfig:
    props = {"log.dirs": f"{tmp_path}/a,{tmp_path}/b", "metadata.log.dir": f"{tmp_path}/m"}
    props.update(extra)
    return BrokerConfig(props)


def test_meta_properties_text_round_trip() -> None:
    meta = MetaProperties("abc", 3, "dir")
    text = meta.to_text()
    assert "version=1\n" in text and "cluster.id=abc\n" in text and "node.id=3\n" in text
    assert "directory.id=dir\n" in text
    assert MetaProperties.from_text(text) == meta
    legacy = MetaProperties.from_text("version=0\nbroker.id=2\ncluster.id=x\n")
    assert legacy == MetaProperties("x", 2, None, 0)
    with pytest.raises(MetaPropertiesError, match="cluster.id"):
        MetaProperties.from_text("version=1\nnode.id=1\n")
    with pytest.raises(MetaPropertiesError, match="version 7"):
        MetaProperties.from_text("version=7\nnode.id=1\ncluster.id=x\n")


def test_format_writes_every_dir(tmp_path: Path) -> None:
    config = node(tmp_path)
    cluster_id = random_uuid()
    results = format_dirs(config, cluster_id)
    assert [r.path for r in results] == [tmp_path / "a", tmp_path / "b", tmp_path / "m"]
    metas = [read_meta_properties(tmp_path / d) for d in "abm"]
    assert all(m is not None and m.cluster_id == cluster_id and m.node_id == 1 for m in metas)
    directory_ids = {m.directory_id for m in metas if m is not None}
    assert len(directory_ids) == 3 and None not in directory_ids
    bootstrap = read_bootstrap(tmp_path / "m")
    assert bootstrap is not None and bootstrap["cluster.id"] == cluster_id
    assert not (tmp_path / "a" / BOOTSTRAP_FILE).exists()


def test_format_twice(tmp_path: Path) -> None:
    config = node(tmp_path)
    cluster_id = random_uuid()
    format_dirs(config, cluster_id)
    with pytest.raises(MetaPropertiesError, match="already formatted. Use --ignore-formatted"):
        format_dirs(config, cluster_id)
    again = format_dirs(config, cluster_id, ignore_formatted=True)
    assert not any(r.formatted for r in again)
    with pytest.raises(MetaPropertiesError, match="already formatted with cluster.id"):
        format_dirs(config, random_uuid(), ignore_formatted=True)


def test_format_ignore_formatted_fills_the_missing_dirs(tmp_path: Path) -> None:
    cluster_id = random_uuid()
    format_dirs(BrokerConfig({"log.dirs": f"{tmp_path}/a"}), cluster_id)
    results = format_dirs(node(tmp_path), cluster_id, ignore_formatted=True)
    assert [r.formatted for r in results] == [False, True, True]


def test_format_standalone(tmp_path: Path) -> None:
    cluster_id = random_uuid()
    format_dirs(node(tmp_path), cluster_id, standalone=True)
    bootstrap = read_bootstrap(tmp_path / "m")
    assert bootstrap is not None and bootstrap["initial.voters"] == [1]
    with pytest.raises(ConfigError, match="remove controller.quorum.voters"):
        format_dirs(
            BrokerConfig({**combined(1), "log.dirs": str(tmp_path / "x")}),
            cluster_id,
            standalone=True,
        )


def test_describe_dirs(tmp_path: Path) -> None:
    config = node(tmp_path)
    assert [s.meta for s in describe_dirs(config)] == [None, None, None]
    format_dirs(config, random_uuid())
    states = describe_dirs(config)
    assert [s.is_metadata for s in states] == [False, False, True]
    assert all(s.meta is not None for s in states)


def test_ensure_formatted_formats_unformatted_dirs(tmp_path: Path) -> None:
    config = node(tmp_path)
    meta = ensure_formatted(config, None)
    assert meta == read_meta_properties(tmp_path / "m")
    assert read_meta_properties(tmp_path / "a").cluster_id == meta.cluster_id  # type: ignore[union-attr]
    assert ensure_formatted(config, None) == meta
    assert ensure_formatted(config, meta.cluster_id) == meta


def test_ensure_formatted_uses_the_given_cluster_id(tmp_path: Path) -> None:
    meta = ensure_formatted(node(tmp_path), "my-cluster")
    assert meta.cluster_id == "my-cluster"


def test_ensure_formatted_refuses_another_cluster(tmp_path: Path) -> None:
    config = node(tmp_path)
    first = ensure_formatted(config, None)
    with pytest.raises(MetaPropertiesError) as info:
        ensure_formatted(config, "other")
    assert str(info.value) == (
        f"Invalid cluster.id in: {tmp_path / 'a' / META_PROPERTIES}. "
        f"Expected other, but read {first.cluster_id}"
    )


def test_ensure_formatted_refuses_dirs_that_disagree(tmp_path: Path) -> None:
    config = node(tmp_path)
    ensure_formatted(config, None)
    (tmp_path / "b" / META_PROPERTIES).write_text("version=1\ncluster.id=zzz\nnode.id=1\n")
    with pytest.raises(MetaPropertiesError, match="Invalid cluster.id in: .*b/meta.properties"):
        ensure_formatted(config, None)


def test_ensure_formatted_refuses_another_node_id(tmp_path: Path) -> None:
    ensure_formatted(node(tmp_path), None)
    with pytest.raises(MetaPropertiesError, match="Stored node id 1 doesn't match .* 2"):
        ensure_formatted(node(tmp_path, **{"node.id": "2"}), None)


def test_ensure_formatted_adds_a_directory_id_to_old_files(tmp_path: Path) -> None:
    """meta.properties as strom/cluster/metadata.py wrote it before directory ids."""
    data = tmp_path / "data"
    data.mkdir()
    (data / META_PROPERTIES).write_text("version=1\ncluster.id=old-id\nnode.id=1\n")
    meta = ensure_formatted(BrokerConfig({"log.dirs": str(data)}), None)
    assert meta.cluster_id == "old-id" and meta.node_id == 1 and meta.directory_id
    assert read_meta_properties(data) == meta


def test_ensure_formatted_malformed_file_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / META_PROPERTIES).write_text("version=1\nnode.id=abc\ncluster.id=x\n")
    with pytest.raises(MetaPropertiesError) as info:
        ensure_formatted(BrokerConfig({"log.dirs": str(data)}), None)
    assert "\n" not in str(info.value) and "meta.properties" in str(info.value)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_a_bind_all_address_is_never_advertised(host: str) -> None:
    """Kafka refuses to tell clients to connect to 0.0.0.0; so does Strom, in one line
    naming the fix. With advertised.listeners set, binding every interface is fine."""
    with pytest.raises(ConfigError, match="advertised as .* set advertised.listeners"):
        BrokerConfig({"listeners": f"PLAINTEXT://{host}:9092"})
    with pytest.raises(ConfigError, match=r"from advertised.listeners"):
        BrokerConfig(
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092",
                "advertised.listeners": f"PLAINTEXT://{host}:9092",
            }
        )
    config = BrokerConfig(
        {
            "listeners": f"PLAINTEXT://{host}:9092",
            "advertised.listeners": "PLAINTEXT://broker1.example:9092",
        }
    )
    assert config.advertised_listeners == ["PLAINTEXT://broker1.example:9092"]
