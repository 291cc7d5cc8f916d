"""The sample properties files under config/ load, validate and say what they claim."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from strom.config import BROKER_CONFIGS, BrokerConfig, Listener, QuorumVoter, parse_properties

CONFIG = Path(__file__).resolve().parents[2] / "config"
VOTERS = [
    QuorumVoter(1, "127.0.0.1", 9093),
    QuorumVoter(2, "127.0.0.1", 9095),
    QuorumVoter(3, "127.0.0.1", 9097),
]


def load(name: str) -> BrokerConfig:
    return BrokerConfig.load(str(CONFIG / name))


@pytest.mark.parametrize(
    "name",
    sorted(
        str(p.relative_to(CONFIG))
        for p in CONFIG.rglob("*.properties")
        # Connect's samples: tests/unit/test_connect_parts.py; the ksql server's:
        # tests/unit/test_ksql_parts.py
        if not p.name.startswith(("connect-", "ksql-"))
    ),
)
def test_every_key_is_known(name: str, caplog: pytest.LogCaptureFixture) -> None:
    props = parse_properties((CONFIG / name).read_text())
    assert set(props) <= set(BROKER_CONFIGS), set(props) - set(BROKER_CONFIGS)
    with caplog.at_level(logging.WARNING):
        load(name)
    assert "unknown" not in caplog.text


def test_server_properties_is_the_default_node() -> None:
    config = load("server.properties")
    default = BrokerConfig()
    assert config.is_broker and config.is_controller
    assert config.quorum_voters == [] and config.voter_ids == frozenset({1})
    assert config.client_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert config.controller_listeners == []
    assert config.log_dir == Path("./strom-data")
    assert config["admin.listeners"] == ["http://127.0.0.1:9644"]  # metrics on
    defaults = default.describe()
    for key, (value, _) in config.describe().items():
        # The file names the directory the default log.dir names, and turns metrics on.
        if key not in ("log.dirs", "admin.listeners"):
            assert value == defaults[key][0], key


@pytest.mark.parametrize("n", [1, 2, 3])
def test_combined_cluster_nodes(n: int) -> None:
    config = load(f"cluster/node{n}.properties")
    assert config.node_id == n
    assert config.is_broker and config.is_controller
    assert config.quorum_voters == VOTERS
    client_port, controller_port = 9090 + 2 * n, 9091 + 2 * n
    assert config.client_listeners == [Listener("PLAINTEXT", "127.0.0.1", client_port)]
    assert config.controller_listeners == [Listener("CONTROLLER", "127.0.0.1", controller_port)]
    assert config.voter_addresses[n] == ("127.0.0.1", controller_port)
    assert config.inter_broker_listener == Listener("PLAINTEXT", "127.0.0.1", client_port)
    assert config.log_dir == Path(f"./strom-data/node{n}")
    assert config.metadata_log_dir == config.log_dir
    assert config["admin.listeners"] == [f"http://127.0.0.1:{9644 + n}"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_controller_only_nodes(n: int) -> None:
    config = load(f"cluster/controller{n}.properties")
    assert config.is_controller and not config.is_broker
    assert config.quorum_voters == VOTERS
    assert config.client_listeners == []
    assert config.controller_listeners == [Listener("CONTROLLER", "127.0.0.1", 9091 + 2 * n)]
    assert config.inter_broker_listener is None


@pytest.mark.parametrize("n", [1, 2])
def test_broker_only_nodes(n: int) -> None:
    config = load(f"cluster/broker{n}.properties")
    assert config.is_broker and not config.is_controller
    assert config.node_id not in config.voter_ids
    assert config.quorum_voters == VOTERS
    assert config.controller_listeners == []
    assert config.client_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9090 + 2 * n)]


def test_cluster_samples_agree() -> None:
    names = [f"cluster/node{n}.properties" for n in (1, 2, 3)]
    configs = [load(name) for name in names]
    assert len({c.node_id for c in configs}) == 3
    assert len({c.log_dir for c in configs}) == 3
    ports = [lst.port for c in configs for lst in c.parsed_listeners]
    assert len(set(ports)) == len(ports)
    controllers = [load(f"cluster/controller{n}.properties") for n in (1, 2, 3)]
    brokers = [load(f"cluster/broker{n}.properties") for n in (1, 2)]
    ids = [c.node_id for c in controllers + brokers]
    assert len(set(ids)) == len(ids)
    for controller in controllers:
        own = controller.voter_addresses[controller.node_id]
        assert controller.controller_listeners[0].port == own[1]


@pytest.mark.parametrize(
    ("names", "brokers"),
    [([f"cluster/node{n}.properties" for n in (1, 2, 3)], 3),
     ([f"cluster/broker{n}.properties" for n in (1, 2)], 2)],
)  # fmt: skip
def test_cluster_samples_keep_acknowledged_writes_through_the_loss_of_a_node(
    names: list[str], brokers: int
) -> None:
    """A cluster built from the samples is a safe one: every topic (the internal ones
    too) on every broker up to three, and acks=all acknowledged only once two have it."""
    for name in names:
        config = load(name)
        factor = min(3, brokers)
        assert config["default.replication.factor"] == factor, name
        assert config["offsets.topic.replication.factor"] == factor, name
        assert config["transaction.state.log.replication.factor"] == factor, name
        assert config["min.insync.replicas"] == 2, name
        assert config["transaction.state.log.min.isr"] == 2, name
