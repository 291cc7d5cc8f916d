"""The ksql server's settings, in ksqlDB's property names, from its properties file.

Owns reading ``config/ksql-server.properties``'s keys into ``KsqlServerConfig``:

- ``listeners`` (default ``http://127.0.0.1:8088``; the first of a comma-separated list
  is served), ``bootstrap.servers`` (or ``ksql.streams.bootstrap.servers``),
  ``ksql.service.id`` (default ``default_``: it names the command topic
  ``_confluent-ksql-<id>_command_topic``), ``ksql.schema.registry.url``,
  ``ksql.schema.registry.basic.auth.user.info`` (and the other settings of
  confluent-kafka's registry client), ``ksql.internal.topic.replicas``,
  ``ksql.persistence.default.format.key`` / ``.value``, ``ksql.output.topic.name.prefix``
  (before the name of a topic a CREATE ... AS SELECT without KAFKA_TOPIC makes),
  ``ksql.spark.master`` (where
  persistent queries run), ``spark.*`` (the Spark session's own settings),
  ``ksql.spark.trigger.interval.ms`` (how often a persistent query looks for new
  records), ``ksql.streams.state.dir`` (the queries' checkpoints),
  ``ksql.streams.processing.guarantee`` (``at_least_once``, or ``exactly_once_v2``:
  the sinks write in transactions), ``ksql.streams.auto.offset.reset`` (where a
  query without the request's ``auto.offset.reset`` starts),
  ``ksql.streams.session.timeout.ms`` (how long the servers of a service id wait for a
  silent one before its queries move) and ``ksql.query.retry.backoff.initial.ms`` /
  ``.max.ms`` (when a failed query is started again), ``ksql.assert.topic.default.timeout.ms``
  / ``ksql.assert.schema.default.timeout.ms`` (how long an ASSERT without TIMEOUT waits);
- the Kafka clients' settings: ``security.protocol``, ``sasl.*``, ``ssl.*`` (with a
  SSL or SASL_SSL protocol) and anything under ``ksql.streams.`` that is a client
  setting, the Java names translated for librdkafka (``strom.client_security``);
- the HTTP listener's own TLS (``ssl.keystore.location``... with an ``https``
  listener) and basic authentication (``authentication.*``), read by
  ``strom.services.http_security``;
- the Kafka Connect cluster of the connector statements: ``ksql.connect.url`` (default
  ``http://localhost:8083``), ``ksql.connect.request.timeout.ms`` (default 5000) and
  ``ksql.connect.basic.auth.credentials.source`` (``NONE``: the request's own
  credentials, or ``FILE``: the ``username`` and ``password`` of the properties file
  ``ksql.connect.basic.auth.credentials.file``, read again when it changes with
  ``ksql.connect.basic.auth.credentials.reload=true``).

Every ``ksql.*`` property is also kept (``properties``) for SHOW PROPERTIES. A value
that cannot be used raises ``ConfigError`` with one line naming the property.

Does not own reading the file (``strom.cli.properties_file``) or serving.
"""

from __future__ import annotations

import re
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.client_security import PROTOCOLS, librdkafka_properties
from strom.config import REGISTRY_CLIENT_CONFIGS, ConfigError, parse_http_listener
from strom.services.http_security import KNOWN_KEYS as LISTENER_SECURITY_KEYS

DEFAULT_LISTENER = "http://127.0.0.1:8088"
DEFAULT_SERVICE_ID = "default_"
STREAMS_PREFIX = "ksql.streams."
REGISTRY_PREFIX = "ksql.schema.registry."
FORMATS = ("JSON", "JSON_SR", "AVRO", "PROTOBUF", "PROTOBUF_NOSR", "DELIMITED", "KAFKA", "NONE")
_SERVICE_ID = re.compile(r"^[A-Za-z0-9._-]+$")
GUARANTEES = ("at_least_once", "exactly_once", "exactly_once_v2")
OFFSET_RESETS = ("earliest", "latest")
# Kafka client settings among ksql.streams.*: passed to the server's clients.
# before the name of a topic a CREATE ... AS SELECT makes when it names none
OUTPUT_TOPIC_PREFIX = "ksql.output.topic.name.prefix"
_CLIENT_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.id", "request.timeout.ms")
DEFAULT_CONNECT_URL = "http://localhost:8083"
CONNECT_URL = "ksql.connect.url"
_CONNECT_CREDENTIALS = "ksql.connect.basic.auth.credentials."


@dataclass(frozen=True)
class KsqlServerConfig:
    listener: str = DEFAULT_LISTENER
    bootstrap_servers: str = "localhost:9092"
    service_id: str = DEFAULT_SERVICE_ID
    schema_registry_url: str | None = None
    # confluent-kafka SchemaRegistryClient settings beside the url (basic auth, TLS)
    schema_registry_client: dict[str, str] = field(default_factory=dict)
    internal_topic_replicas: int = 1
    default_key_format: str = "KAFKA"
    default_value_format: str | None = None
    output_topic_prefix: str = ""  # ksql.output.topic.name.prefix
    # the Kafka Connect cluster CREATE / DROP / DESCRIBE / SHOW CONNECTOR(S) speak to
    connect_url: str = DEFAULT_CONNECT_URL
    connect_timeout_ms: int = 5_000
    connect_credentials_file: str | None = None  # basic auth's username and password
    connect_credentials_reload: bool = False
    spark_master: str = "local[*]"
    spark_settings: dict[str, str] = field(default_factory=dict)  # spark.* properties
    trigger_interval_ms: int = 500
    state_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "strom-ksql")
    processing_guarantee: str = "at_least_once"
    auto_offset_reset: str = "latest"
    client: dict[str, Any] = field(default_factory=dict)  # librdkafka settings
    listener_security: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)  # every ksql.* property
    # the servers of a service id: how long a silent one keeps its queries
    session_timeout_ms: int = 10_000
    # a failed persistent query is started again after these (doubling) backoffs
    query_retry_backoff_initial_ms: int = 15_000
    query_retry_backoff_max_ms: int = 900_000
    # how long an ASSERT TOPIC / ASSERT SCHEMA without a TIMEOUT waits
    assert_topic_timeout_ms: int = 1000
    assert_schema_timeout_ms: int = 1000

    @property
    def command_topic(self) -> str:
        return f"_confluent-ksql-{self.service_id}_command_topic"

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """confluent-kafka settings of the server's clients."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.client, **extra}


def _positive_int(props: dict[str, str], key: str, default: int) -> int:
    text = props.get(key)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}") from None
    if value < 1:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: must be at least 1")
    return value


def _choice(props: dict[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    text = props.get(key)
    if text is None or not text.strip():
        return default
    if text.strip().lower() not in choices:
        raise ConfigError(
            f"Invalid value {text!r} for configuration {key}: not one of {', '.join(choices)}"
        )
    return text.strip().lower()


def _format(props: dict[str, str], key: str, default: str | None) -> str | None:
    text = props.get(key)
    if text is None or not text.strip():
        return default
    if text.strip().upper() not in FORMATS:
        raise ConfigError(
            f"Invalid value {text!r} for configuration {key}: not one of {', '.join(FORMATS)}"
        )
    return text.strip().upper()


def _client_settings(props: dict[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, value in props.items():
        if key.startswith(_CLIENT_PREFIXES):
            settings[key] = value
    for key, value in props.items():  # ksql.streams.X overrides X
        inner = key[len(STREAMS_PREFIX) :] if key.startswith(STREAMS_PREFIX) else None
        if inner is not None and inner.startswith(_CLIENT_PREFIXES):
            settings[inner] = value
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"Invalid value {settings['security.protocol']!r} for configuration "
            f"security.protocol: not one of {', '.join(PROTOCOLS)}"
        )
    if "SSL" not in protocol:
        settings = {k: v for k, v in settings.items() if not k.startswith("ssl.")}
    try:
        return librdkafka_properties(settings)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _connect_settings(props: dict[str, str]) -> dict[str, Any]:
    """The ``connect_*`` fields from the ``ksql.connect.*`` properties."""
    url = props.get(CONNECT_URL, DEFAULT_CONNECT_URL).strip()
    parsed = urllib.parse.urlsplit(url)
    try:
        parsed.port  # noqa: B018 - a port that is not a number raises
    except ValueError:
        parsed = parsed._replace(netloc="")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"Invalid value {url!r} for configuration {CONNECT_URL}: "
            "not an http:// or https:// URL with a host"
        )
    source = _choice(props, _CONNECT_CREDENTIALS + "source", ("none", "file"), "none")
    credentials = None
    if source == "file":
        credentials = props.get(_CONNECT_CREDENTIALS + "file", "").strip()
        if not credentials:
            raise ConfigError(
                f"'{_CONNECT_CREDENTIALS}file' cannot be empty if "
                f"'{_CONNECT_CREDENTIALS}source' is set to 'FILE'"
            )
    reload = _choice(props, _CONNECT_CREDENTIALS + "reload", ("true", "false"), "false")
    return {
        "connect_url": url.rstrip("/"),
        "connect_timeout_ms": _positive_int(props, "ksql.connect.request.timeout.ms", 5_000),
        "connect_credentials_file": credentials,
        "connect_credentials_reload": reload == "true",
    }


def server_config(props: dict[str, str]) -> KsqlServerConfig:
    """The server's settings from its properties; ``ConfigError`` names a bad one."""
    listener = props.get("listeners", DEFAULT_LISTENER).split(",")[0].strip()
    scheme, _, _ = parse_http_listener(listener, "listeners", schemes=("http", "https"))
    bootstrap = props.get(
        STREAMS_PREFIX + "bootstrap.servers", props.get("bootstrap.servers", "localhost:9092")
    ).strip()
    if not bootstrap:
        raise ConfigError("bootstrap.servers must name at least one host:port")
    service_id = props.get("ksql.service.id", DEFAULT_SERVICE_ID).strip()
    if not _SERVICE_ID.match(service_id):
        raise ConfigError(
            f"Invalid value {service_id!r} for configuration ksql.service.id: "
            "only letters, digits, '.', '_' and '-' make a topic name"
        )
    listener_security = {
        k: v
        for k, v in props.items()
        if k in LISTENER_SECURITY_KEYS and (scheme == "https" or not k.startswith("ssl."))
    }
    return KsqlServerConfig(
        listener=listener,
        bootstrap_servers=bootstrap,
        service_id=service_id,
        schema_registry_url=props.get("ksql.schema.registry.url") or None,
        schema_registry_client={
            d.name: props[REGISTRY_PREFIX + d.name]
            for d in REGISTRY_CLIENT_CONFIGS
            if REGISTRY_PREFIX + d.name in props
        },
        internal_topic_replicas=_positive_int(props, "ksql.internal.topic.replicas", 1),
        default_key_format=_format(props, "ksql.persistence.default.format.key", "KAFKA")
        or "KAFKA",
        default_value_format=_format(props, "ksql.persistence.default.format.value", None),
        output_topic_prefix=props.get(OUTPUT_TOPIC_PREFIX, ""),
        **_connect_settings(props),
        spark_master=props.get("ksql.spark.master", "local[*]"),
        spark_settings={k: v for k, v in props.items() if k.startswith("spark.")},
        trigger_interval_ms=_positive_int(props, "ksql.spark.trigger.interval.ms", 500),
        state_dir=Path(
            props.get(STREAMS_PREFIX + "state.dir") or Path(tempfile.gettempdir()) / "strom-ksql"
        ),
        processing_guarantee=_choice(
            props, STREAMS_PREFIX + "processing.guarantee", GUARANTEES, "at_least_once"
        ),
        auto_offset_reset=_choice(
            props, STREAMS_PREFIX + "auto.offset.reset", OFFSET_RESETS, "latest"
        ),
        client=_client_settings(props),
        listener_security=listener_security,
        properties={k: v for k, v in props.items() if k.startswith("ksql.")},
        session_timeout_ms=_positive_int(props, STREAMS_PREFIX + "session.timeout.ms", 10_000),
        query_retry_backoff_initial_ms=_positive_int(
            props, "ksql.query.retry.backoff.initial.ms", 15_000
        ),
        query_retry_backoff_max_ms=_positive_int(props, "ksql.query.retry.backoff.max.ms", 900_000),
        assert_topic_timeout_ms=_positive_int(props, "ksql.assert.topic.default.timeout.ms", 1000),
        assert_schema_timeout_ms=_positive_int(
            props, "ksql.assert.schema.default.timeout.ms", 1000
        ),
    )
