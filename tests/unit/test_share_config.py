"""Every share group setting Strom accepts, given a bad value, is refused in one readable
line naming it: the broker's (group.share.*, share.coordinator.*) and a group's own
(share.*, IncrementalAlterConfigs on the GROUP resource)."""

from __future__ import annotations

import pytest

from strom.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    BrokerConfig,
    ConfigError,
    validate_group_configs,
)

BROKER_KEYS = sorted(k for k in BROKER_CONFIGS if k.startswith(("group.share.", "share.")))
GROUP_KEYS = sorted(k for k in GROUP_CONFIGS if k.startswith("share."))


def _bad_values(kind: str, minimum: float | None) -> list[str]:
    if kind == "bool":
        return ["maybe"]
    if kind == "int":
        return ["many", str(int(minimum if minimum is not None else 0) - 1)]
    return ["nonsense"]


def _one_line(error: pytest.ExceptionInfo[ConfigError], key: str) -> None:
    text = str(error.value)
    assert "\n" not in text and text.strip() == text
    assert key in text, text


def test_the_share_settings_are_all_known() -> None:
    assert "group.share.enable" in BROKER_KEYS
    assert "group.share.max.share.sessions" in BROKER_KEYS
    assert "share.coordinator.write.timeout.ms" in BROKER_KEYS
    assert len(BROKER_KEYS) == 18 and len(GROUP_KEYS) == 7


@pytest.mark.parametrize("key", BROKER_KEYS)
def test_a_bad_broker_share_setting_is_one_line(key: str) -> None:
    definition = BROKER_CONFIGS[key]
    for bad in _bad_values(definition.kind, definition.minimum):
        with pytest.raises(ConfigError) as error:
            BrokerConfig({key: bad})
        _one_line(error, key)


@pytest.mark.parametrize("key", GROUP_KEYS)
def test_a_bad_group_share_config_is_one_line(key: str) -> None:
    definition = GROUP_CONFIGS[key]
    for bad in _bad_values(definition.kind, definition.minimum):
        with pytest.raises(ConfigError) as error:
            validate_group_configs({key: bad}, BrokerConfig())
        _one_line(error, key)


def test_a_share_setting_outside_its_bounds_is_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        BrokerConfig({"group.share.record.lock.duration.ms": "90000"})
    _one_line(error, "group.share.record.lock.duration.ms")
    with pytest.raises(ConfigError) as error:
        validate_group_configs({"share.record.lock.duration.ms": "5000"}, BrokerConfig())
    _one_line(error, "share.record.lock.duration.ms")
