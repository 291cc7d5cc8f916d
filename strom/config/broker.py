"""A node's effective configuration (``BrokerConfig``): defaults, then
``server.properties``, then ``--override`` pairs, every value validated; KRaft's cluster
settings (roles, the quorum, controller and client listeners, the security protocol map)
and the checks Kafka's KafkaConfig makes of them; the ``ssl.*`` and ``sasl.*`` settings,
also per listener as ``listener.name.<listener>.<key>``; and a topic's effective configs
(its overrides over the broker's defaults) and their translation into a storage
``LogConfig``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from strom.config.broker_keys import (
    AUTHORIZER_CLASSES,
    BROKER_CONFIGS,
    HTTP_LISTENER_PREFIXES,
    KAFKA_ONLY,
    LISTENER_PREFIXED,
    MECHANISM_SCOPED,
    PROCESS_ROLES,
    ROLE_BROKER,
    ROLE_CONTROLLER,
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    SUPPORTED_SECURITY_PROTOCOLS,
    TLS_PROTOCOLS,
    broker_config_definition,
    check_served,
)
from strom.config.listeners import (
    NON_ROUTABLE_HOSTS,
    Listener,
    QuorumVoter,
    check_distinct,
    parse_admin_listener,
    parse_host_port,
    parse_listener,
    parse_protocol_map,
    parse_voters,
)
from strom.config.topic_keys import TOPIC_CONFIGS
from strom.config.values import LONG_MAX, ConfigError, ConfigSource, render
from strom.storage.log_config import LogConfig

log = logging.getLogger(__name__)


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: ``key=value`` or ``key: value``, # and ! comments."""
    props: dict[str, str] = {}
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                props[key.strip()] = value.strip()
                break
        else:
            raise ConfigError(f"line {lineno}: expected key=value, got {line!r}")
    return props


class BrokerConfig:
    """A broker's effective configuration: defaults, then the file, then overrides."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._raw: dict[str, str] = {}
        self._values: dict[str, Any] = {d.name: d.default for d in BROKER_CONFIGS.values()}
        # listener.name.<listener>.<key> overrides: (LISTENER, key) -> raw value
        self._listener_raw: dict[tuple[str, str], str] = {}
        for key, raw in (props or {}).items():
            self.set(key, raw)
        self._check()

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(parse_properties(Path(path).read_text()))
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override expects key=value, got {item!r}")
            props[key.strip()] = value
        return cls(props)

    def set(self, key: str, raw: str | None) -> None:
        prefixed = LISTENER_PREFIXED.match(key)
        if prefixed is not None:
            self._set_for_listener(prefixed.group(1).upper(), prefixed.group(2), raw)
            return
        definition = BROKER_CONFIGS.get(key)
        if definition is None:
            log.warning("ignoring unknown broker config %s", key)
            return
        if raw is None:
            self._raw.pop(key, None)
            self._values[key] = definition.default
        else:
            self._values[key] = definition.parse(raw)
            self._raw[key] = raw

    def _set_for_listener(self, listener: str, key: str, raw: str | None) -> None:
        """``listener.name.<listener>.<key>``: a security setting for one listener."""
        mechanism, dot, rest = key.partition(".")
        scoped = rest in MECHANISM_SCOPED or rest.startswith("sasl.oauthbearer.")
        if dot and scoped and rest in BROKER_CONFIGS and mechanism.upper() in SASL_MECHANISMS:
            BROKER_CONFIGS[rest].parse(raw)
            key = f"{mechanism.lower()}.{rest}"
        elif (
            not key.startswith(("ssl.", "sasl.")) and key not in MECHANISM_SCOPED
        ) or key not in BROKER_CONFIGS:
            log.warning("ignoring unknown broker config listener.name.%s.%s", listener, key)
            return
        else:
            BROKER_CONFIGS[key].parse(raw)  # a bad value is refused here, in one line
        if raw is None:
            self._listener_raw.pop((listener, key), None)
        else:
            self._listener_raw[(listener, key)] = raw

    def http_listener_settings(self, prefix: str) -> dict[str, str]:
        """The settings given for one HTTP listener (a key of ``HTTP_LISTENER_PREFIXES``),
        named as the services' --config names them (the prefix taken off): only those
        set, so that the services' own defaults and checks apply
        (``strom.services.http_security``)."""
        listener = HTTP_LISTENER_PREFIXES[prefix]
        return {
            key[len(prefix) :]: raw
            for key, raw in self._raw.items()
            if key.startswith(prefix) and key != listener
        }

    def listener_value(self, listener: str, key: str) -> Any:
        """A security setting as one listener sees it: its ``listener.name.<listener>.``
        override, else the broker-wide value."""
        raw = self._listener_raw.get((listener.upper(), key))
        if raw is not None:
            return BROKER_CONFIGS[key].parse(raw)
        return self._values[key]

    def listener_key(self, listener: str, key: str) -> str:
        """The property a listener's setting was read from (for messages)."""
        if (listener.upper(), key) in self._listener_raw:
            return f"listener.name.{listener.lower()}.{key}"
        return key

    def jaas_config(self, listener: str, mechanism: str) -> tuple[str, str] | None:
        """(property, value) of the JAAS configuration a listener's mechanism uses:
        ``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
        ``listener.name.<l>.sasl.jaas.config``, else ``sasl.jaas.config``."""
        name = listener.upper()
        for key in (f"{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
            raw = self._listener_raw.get((name, key))
            if raw is not None:
                return f"listener.name.{listener.lower()}.{key}", raw.strip()
        value = self._values["sasl.jaas.config"]
        return ("sasl.jaas.config", value) if value else None

    def mechanism_value(self, listener: str, mechanism: str, key: str) -> Any:
        """A setting for one mechanism on one listener:
        ``listener.name.<l>.<mechanism>.<key>``, else the listener's, else the broker's."""
        raw = self._listener_raw.get((listener.upper(), f"{mechanism.lower()}.{key}"))
        if raw is not None:
            return BROKER_CONFIGS[key].parse(raw)
        return self.listener_value(listener, key)

    def sasl_mechanisms(self, listener: str) -> list[str]:
        """``sasl.enabled.mechanisms`` of a listener, upper-cased."""
        return [m.upper() for m in self.listener_value(listener, "sasl.enabled.mechanisms")]

    def _check_security(self, listeners: list[Listener], protocols: dict[str, str]) -> None:
        """What a TLS or SASL listener cannot start without, one line each (the TLS
        files themselves are read when the broker builds its contexts)."""
        for listener in listeners:
            protocol = protocols.get(listener.name)
            if protocol in TLS_PROTOCOLS and not (
                self.listener_value(listener.name, "ssl.keystore.location")
                or self.listener_value(listener.name, "ssl.keystore.certificate.chain")
            ):
                raise ConfigError(
                    f"Listener {listener.name} ({protocol}) needs its key and certificate: set "
                    f"ssl.keystore.location (or listener.name.{listener.name.lower()}."
                    "ssl.keystore.location) to a PEM file holding both"
                )
            if protocol in SASL_PROTOCOLS:
                mechanisms = self.sasl_mechanisms(listener.name)
                key = self.listener_key(listener.name, "sasl.enabled.mechanisms")
                if not mechanisms:
                    raise ConfigError(f"{key} is empty for SASL listener {listener.name}")
                for mechanism in mechanisms:
                    if mechanism not in SASL_MECHANISMS:
                        raise ConfigError(
                            f"{key}: {mechanism} is not served (listener {listener.name}); "
                            f"Strom serves {', '.join(SASL_MECHANISMS)}"
                        )

    def _check(self) -> None:
        """Kafka's KafkaConfig checks of roles, quorum and listeners, one line each."""
        listeners = [parse_listener(spec, "listeners") for spec in self.listeners]
        advertised = [
            parse_listener(spec, "advertised.listeners")
            for spec in self._values["advertised.listeners"] or []
        ]
        roles = self.process_roles
        protocols = self.security_protocol_map
        check_distinct(listeners, "listeners")
        for spec in self._values["admin.listeners"]:
            parse_admin_listener(spec)
        for key in ("schema.registry.listener", "rest.proxy.listener"):
            if self._values[key] is not None:
                parse_admin_listener(self._values[key], key)
                if self.embedded_services_bootstrap is None:
                    raise ConfigError(
                        f"{key} needs a PLAINTEXT client listener for the service to reach "
                        "the broker on (or run `strom schema-registry`/`strom rest-proxy` "
                        "with the client settings a secured listener needs)"
                    )
        check_distinct(advertised, "advertised.listeners", ports=False)
        authorizer = self._values["authorizer.class.name"]
        if authorizer and authorizer not in AUTHORIZER_CLASSES:
            raise ConfigError(
                f"Unknown authorizer.class.name {authorizer!r}: Strom serves "
                f"{', '.join(AUTHORIZER_CLASSES)}"
            )
        for listener in [*listeners, *advertised]:
            protocol = protocols.get(listener.name)
            if protocol is None:
                raise ConfigError(
                    f"Listener {listener.name} is not in listener.security.protocol.map "
                    f"({render(self._values['listener.security.protocol.map'])})"
                )
            if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"Listener {listener.name} uses security protocol {protocol}: "
                    f"Strom supports only {', '.join(SUPPORTED_SECURITY_PROTOCOLS)} listeners"
                )
        self._check_security(listeners, protocols)
        for listener in advertised or listeners:
            if listener.host in NON_ROUTABLE_HOSTS and not self.is_controller_listener(
                listener.name
            ):
                source = "advertised.listeners" if advertised else "listeners"
                raise ConfigError(
                    f"{listener.name} listener would be advertised as {listener.host} (from "
                    f"{source}), where clients cannot connect: set advertised.listeners to a "
                    "routable address, e.g. advertised.listeners="
                    f"{listener.name}://<host name or IP>:{listener.port}"
                )
        voters = self.quorum_voters
        voters_text = render(self._values["controller.quorum.voters"])
        bootstrap = self.quorum_bootstrap_servers
        controller_names = self.controller_listener_names
        voter_ids = [voter.node_id for voter in voters]
        node_id = self.node_id
        controllers = [lst for lst in listeners if lst.name in controller_names]
        clients = [lst for lst in listeners if lst.name not in controller_names]
        if ROLE_CONTROLLER in roles:
            if voters and node_id not in voter_ids:
                raise ConfigError(
                    f"node.id {node_id} must be one of the voters in controller.quorum.voters "
                    f"({voters_text}) on a controller"
                )
            if (voters or ROLE_BROKER not in roles) and not controllers:
                raise ConfigError(
                    "A controller needs a listener named in controller.listener.names "
                    f"({','.join(controller_names) or 'empty'}) among listeners "
                    f"({','.join(self.listeners)})"
                )
            if ROLE_BROKER not in roles and clients:
                raise ConfigError(
                    "listeners of a controller-only node must all be named in "
                    f"controller.listener.names ({','.join(controller_names)}); "
                    f"{clients[0].name} is not"
                )
        if ROLE_BROKER in roles:
            if ROLE_CONTROLLER not in roles:
                if not voters and not bootstrap:
                    raise ConfigError(
                        "A broker-only node needs controller.quorum.voters or "
                        "controller.quorum.bootstrap.servers to find the controllers"
                    )
                if not voters:
                    raise ConfigError(
                        "Dynamic quorums (controller.quorum.bootstrap.servers without "
                        "controller.quorum.voters) are not served: list the controllers in "
                        "controller.quorum.voters"
                    )
                if node_id in voter_ids:
                    raise ConfigError(
                        f"node.id {node_id} of a broker-only node must not be among the voters "
                        f"in controller.quorum.voters ({voters_text})"
                    )
                if controllers:
                    raise ConfigError(
                        f"Controller listener {controllers[0].name} must not appear in listeners "
                        "of a broker-only node"
                    )
                if not controller_names:
                    raise ConfigError(
                        "controller.listener.names must name the controllers' listener on a "
                        "broker-only node"
                    )
            if not clients:
                raise ConfigError(
                    "A broker needs a listener not named in controller.listener.names "
                    f"({','.join(controller_names)}) among listeners ({','.join(self.listeners)})"
                )
            name = self._values["inter.broker.listener.name"]
            if name is not None:
                name = name.upper()
                if name in controller_names:
                    raise ConfigError(
                        f"inter.broker.listener.name {name} must not be a controller listener "
                        f"(controller.listener.names={','.join(controller_names)})"
                    )
                if name not in {lst.name for lst in clients}:
                    raise ConfigError(
                        f"inter.broker.listener.name {name} must be one of the listeners' names "
                        f"({','.join(lst.name for lst in clients)})"
                    )
        self._check_served()
        self._check_share_bounds()

    def _check_share_bounds(self) -> None:
        """Each group.share.* setting within its group.share.min/max.* bounds."""
        for middle in ("session.timeout.ms", "heartbeat.interval.ms", "record.lock.duration.ms"):
            value = self._values[f"group.share.{middle}"]
            low = self._values[f"group.share.min.{middle}"]
            high = self._values[f"group.share.max.{middle}"]
            if not low <= value <= high:
                raise ConfigError(
                    f"group.share.{middle}={value} must be between group.share.min.{middle}"
                    f"={low} and group.share.max.{middle}={high}"
                )

    def _check_served(self) -> None:
        """Refuse a Kafka-only config set to a value Strom would not act on (one line
        naming it); warn of one set to a value it accepts and ignores."""
        given = [(key, self._values[key], raw) for key, raw in self._raw.items()]
        for (listener, key), raw in self._listener_raw.items():
            if key in BROKER_CONFIGS:
                given.append(
                    (f"listener.name.{listener.lower()}.{key}", BROKER_CONFIGS[key].parse(raw), raw)
                )
        for key, value, raw in given:
            if check_served(key, value):
                definition = broker_config_definition(key)
                assert definition is not None  # check_served knows the key
                why = KAFKA_ONLY[definition.name].why
                log.warning("%s=%s is accepted and changes nothing: %s", key, raw.strip(), why)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def is_set(self, key: str) -> bool:
        return key in self._raw

    # Derived values -------------------------------------------------------

    @property
    def process_roles(self) -> frozenset[str]:
        """``process.roles`` checked: broker and/or controller, each once."""
        raw: list[str] = self._values["process.roles"]
        roles = [role.strip().lower() for role in raw]
        for role in roles:
            if role not in PROCESS_ROLES:
                raise ConfigError(
                    f"Unknown process role {role!r} in process.roles "
                    "(only 'broker' and 'controller' are allowed roles)"
                )
        if len(set(roles)) != len(roles):
            raise ConfigError(f"Duplicate role names found in process.roles: {','.join(raw)}")
        if not roles:
            raise ConfigError("process.roles must name broker, controller or both")
        return frozenset(roles)

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.process_roles

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.process_roles

    @property
    def quorum_voters(self) -> list[QuorumVoter]:
        """``controller.quorum.voters`` as configured; empty means this node alone."""
        return parse_voters(self._values["controller.quorum.voters"])

    @property
    def voter_ids(self) -> frozenset[int]:
        """The ids of the quorum's voters: the configured ones, or this node alone."""
        voters = self.quorum_voters
        if voters:
            return frozenset(voter.node_id for voter in voters)
        return frozenset({self.node_id})

    @property
    def voter_addresses(self) -> dict[int, tuple[str, int]]:
        """Voter id -> (host, port) of its controller listener; {} when this node is alone."""
        return {voter.node_id: (voter.host, voter.port) for voter in self.quorum_voters}

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """``controller.quorum.bootstrap.servers`` as (host, port) pairs."""
        return [
            parse_host_port(entry, "controller.quorum.bootstrap.servers")
            for entry in self._values["controller.quorum.bootstrap.servers"]
        ]

    @property
    def controller_listener_names(self) -> list[str]:
        return [name.upper() for name in self._values["controller.listener.names"]]

    def is_controller_listener(self, name: str) -> bool:
        return name.upper() in self.controller_listener_names

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map``: listener name -> security protocol."""
        return parse_protocol_map(self._values["listener.security.protocol.map"])

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (ConfigError if the map lacks it)."""
        protocol = self.security_protocol_map.get(listener_name.upper())
        if protocol is None:
            raise ConfigError(f"Listener {listener_name} is not in listener.security.protocol.map")
        return protocol

    @property
    def parsed_listeners(self) -> list[Listener]:
        return [parse_listener(spec) for spec in self.listeners]

    @property
    def controller_listeners(self) -> list[Listener]:
        """The listeners named in ``controller.listener.names`` (served by controllers)."""
        names = self.controller_listener_names
        return [lst for lst in self.parsed_listeners if lst.name in names]

    @property
    def client_listeners(self) -> list[Listener]:
        """The other listeners: clients and other brokers connect to these."""
        names = self.controller_listener_names
        return [lst for lst in self.parsed_listeners if lst.name not in names]

    @property
    def embedded_services_bootstrap(self) -> str | None:
        """``host:port`` of the first PLAINTEXT client listener, where the services served
        inside the broker (``schema.registry.listener``, ``rest.proxy.listener``) connect;
        an unspecified host is reached on 127.0.0.1."""
        for listener in self.client_listeners:
            if self.security_protocol_map.get(listener.name) == "PLAINTEXT":
                host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                host = f"[{host}]" if ":" in host else host
                return f"{host}:{listener.port}"
        return None

    @property
    def inter_broker_listener_name(self) -> str | None:
        """``inter.broker.listener.name``, by default PLAINTEXT if a client listener has that
        name, else the first client listener's name (None on a controller-only node)."""
        name = self._values["inter.broker.listener.name"]
        if name is not None:
            return str(name).upper()
        clients = self.client_listeners
        if not clients:
            return None
        names = [lst.name for lst in clients]
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    @property
    def inter_broker_listener(self) -> Listener | None:
        """The listener other brokers reach this one on (its advertised form if any)."""
        name = self.inter_broker_listener_name
        if name is None:
            return None
        for spec in self.advertised_listeners:
            listener = parse_listener(spec)
            if listener.name == name:
                return listener
        return next((lst for lst in self.client_listeners if lst.name == name), None)

    @property
    def node_id(self) -> int:
        broker_id = self._values["broker.id"]
        if broker_id is not None and broker_id >= 0 and not self.is_set("node.id"):
            return int(broker_id)
        return int(self._values["node.id"])

    @property
    def listeners(self) -> list[str]:
        return list(self._values["listeners"])

    @property
    def advertised_listeners(self) -> list[str]:
        return list(self._values["advertised.listeners"] or self._values["listeners"])

    @property
    def log_dirs(self) -> list[Path]:
        """Every log directory: ``log.dirs``, else ``log.dir``."""
        dirs = self._values["log.dirs"]
        return [Path(d) for d in dirs] if dirs else [Path(self._values["log.dir"])]

    @property
    def log_dir(self) -> Path:
        dirs = self._values["log.dirs"]
        if dirs:
            if len(dirs) > 1:
                raise ConfigError("log.dirs: only one log directory is supported")
            return Path(dirs[0])
        return Path(self._values["log.dir"])

    @property
    def metadata_log_dir(self) -> Path:
        """``metadata.log.dir``, by default the first log directory. The metadata log
        itself lives in its ``__cluster_metadata-0`` subdirectory."""
        value = self._values["metadata.log.dir"]
        return Path(value) if value else self.log_dirs[0]

    @property
    def retention_ms(self) -> int:
        if self._values["log.retention.ms"] is not None:
            return int(self._values["log.retention.ms"])
        if self._values["log.retention.minutes"] is not None:
            return int(self._values["log.retention.minutes"]) * 60_000
        return int(self._values["log.retention.hours"]) * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self._values["log.roll.ms"] is not None:
            return int(self._values["log.roll.ms"])
        return int(self._values["log.roll.hours"]) * 3_600_000

    def broker_default_for_topic(self, topic_key: str) -> Any:
        """The value a topic config takes when the topic does not override it."""
        definition = TOPIC_CONFIGS[topic_key]
        if topic_key == "retention.ms":
            return self.retention_ms
        if topic_key == "segment.ms":
            return self.roll_ms
        if topic_key == "flush.ms":
            value = self._values["log.flush.interval.ms"]
            return LONG_MAX if value is None else value
        if definition.broker_name is not None:
            return self._values[definition.broker_name]
        return definition.default

    def describe(self) -> dict[str, tuple[str | None, bool]]:
        """Every broker config as (value, is_default)."""
        return {
            name: (
                None if definition.kind == "password" else render(self._values[name]),
                name not in self._raw,
            )
            for name, definition in BROKER_CONFIGS.items()
        }


def effective_topic_configs(
    broker: BrokerConfig, overrides: Mapping[str, str]
) -> dict[str, tuple[Any, ConfigSource]]:
    """Each topic config as (value, source); a broker-supplied value counts as static."""
    out: dict[str, tuple[Any, ConfigSource]] = {}
    for key, definition in TOPIC_CONFIGS.items():
        if key in overrides:
            out[key] = (definition.parse(overrides[key]), ConfigSource.DYNAMIC_TOPIC)
        else:
            source = ConfigSource.DEFAULT
            name = definition.broker_name
            if name is not None and (
                broker.is_set(name)
                or (key == "retention.ms" and any(broker.is_set(k) for k in _RETENTION_KEYS))
                or (key == "segment.ms" and broker.is_set("log.roll.hours"))
            ):
                source = ConfigSource.STATIC_BROKER
            out[key] = (broker.broker_default_for_topic(key), source)
    return out


_RETENTION_KEYS = ("log.retention.hours", "log.retention.minutes", "log.retention.ms")


def log_config_for(broker: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The storage view of a topic's effective configs."""
    values = {key: value for key, (value, _) in effective_topic_configs(broker, overrides).items()}
    flush_messages = values["flush.messages"]
    flush_ms = values["flush.ms"]
    return LogConfig(
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        index_interval_bytes=values["index.interval.bytes"],
        segment_index_bytes=values["segment.index.bytes"],
        flush_messages=None if flush_messages >= LONG_MAX else flush_messages,
        flush_ms=None if flush_ms >= LONG_MAX else flush_ms,
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        max_message_bytes=values["max.message.bytes"],
        message_timestamp_type=values["message.timestamp.type"],
        message_timestamp_before_max_ms=values["message.timestamp.before.max.ms"],
        message_timestamp_after_max_ms=values["message.timestamp.after.max.ms"],
        cleanup_policy=",".join(values["cleanup.policy"]),
        compression_type=values["compression.type"],
        file_delete_delay_ms=values["file.delete.delay.ms"],
        delete_retention_ms=values["delete.retention.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
    )
