"""The broker's settings for its HTTP listeners (the admin listener, the embedded schema
registry and REST proxy): the standalone services' TLS and basic authentication names
with a prefix per listener, handed to the services' one reader of them
(``strom.services.http_security``), whose messages then name the broker's property."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config import (
    BROKER_CONFIGS,
    HTTP_LISTENER_PREFIXES,
    BrokerConfig,
    ConfigError,
)
from strom.services.http_security import (
    KNOWN_KEYS,
    REGISTRY_CLIENT_PREFIX,
    HttpSecurityError,
    http_security,
)


def test_every_prefixed_setting_is_one_the_services_take() -> None:
    for prefix, listener in HTTP_LISTENER_PREFIXES.items():
        names = [k[len(prefix) :] for k in BROKER_CONFIGS if k.startswith(prefix) and k != listener]
        assert "authentication.method" in names and "ssl.keystore.location" in names
        for name in names:
            assert name in KNOWN_KEYS or (
                prefix == "rest.proxy." and name.startswith(REGISTRY_CLIENT_PREFIX)
            ), prefix + name
    for prefix in HTTP_LISTENER_PREFIXES:
        for name in ("ssl.key.password", "ssl.keystore.password"):
            assert BROKER_CONFIGS[prefix + name].kind == "password"  # never described
    assert BROKER_CONFIGS["rest.proxy.schema.registry.basic.auth.user.info"].kind == "password"


def test_only_the_settings_given_reach_the_service() -> None:
    config = BrokerConfig(
        {
            "admin.listeners": "https://127.0.0.1:0",
            "admin.ssl.keystore.location": "/etc/strom/admin.pem",
            "admin.authentication.roles": "metrics",
            "rest.proxy.listener": "http://127.0.0.1:0",
            "rest.proxy.schema.registry.basic.auth.user.info": "proxy:secret",
        }
    )
    assert config.http_listener_settings("admin.") == {
        "ssl.keystore.location": "/etc/strom/admin.pem",
        "authentication.roles": "metrics",
    }
    assert config.http_listener_settings("schema.registry.") == {}
    assert config.http_listener_settings("rest.proxy.") == {
        "schema.registry.basic.auth.user.info": "proxy:secret"
    }


def test_https_listeners_are_accepted() -> None:
    BrokerConfig(
        {
            "admin.listeners": "https://127.0.0.1:9644",
            "schema.registry.listener": "https://127.0.0.1:8081",
            "rest.proxy.listener": "https://127.0.0.1:8082",
        }
    )


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("schema.registry.authentication.method=DIGEST", "schema.registry.authentication.method"),
        ("rest.proxy.ssl.client.authentication=ALWAYS", "rest.proxy.ssl.client.authentication"),
        ("admin.authentication.method=basic", "must be one of NONE, BASIC"),
    ],
)
def test_a_bad_value_is_one_line(setting: str, expected: str) -> None:
    key, _, value = setting.partition("=")
    with pytest.raises(ConfigError, match=expected):
        BrokerConfig({key: value})


@pytest.mark.parametrize(
    ("prefix", "listener", "props", "expected"),
    [
        ("admin.", "http://127.0.0.1:0", {"ssl.keystore.location": "/x"},
         "admin.ssl.* settings need an https:// listener"),
        ("schema.registry.", "http://127.0.0.1:0", {"authentication.method": "BASIC"},
         "schema.registry.authentication.method=BASIC needs "
         "schema.registry.authentication.users.file"),
        ("rest.proxy.", "http://127.0.0.1:0",
         {"authentication.method": "BASIC", "authentication.users.file": "/nope"},
         "rest.proxy.authentication.users.file: cannot read /nope"),
        ("rest.proxy.", "https://127.0.0.1:0", {"ssl.keystore.location": "/nope"},
         "rest.proxy.ssl.keystore.location: cannot read /nope"),
        ("admin.", "https://127.0.0.1:0", {},
         "admin.ssl.keystore.location: a TLS listener needs its key"),
    ],
)  # fmt: skip
def test_messages_name_the_brokers_property(
    prefix: str, listener: str, props: dict[str, str], expected: str
) -> None:
    with pytest.raises(HttpSecurityError) as raised:
        http_security(listener, props, prefix)
    assert str(raised.value).startswith(expected), raised.value


def test_a_service_config_file_still_names_its_own_keys(tmp_path: Path) -> None:
    with pytest.raises(HttpSecurityError, match="^authentication.users.file: cannot read"):
        http_security(
            "http://127.0.0.1:0",
            {"authentication.method": "BASIC", "authentication.users.file": str(tmp_path / "x")},
        )
