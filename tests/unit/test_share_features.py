"""share.version, the feature that gates share groups, and the checks an UpdateFeatures
change of it passes (strom/cluster/features.py)."""

from __future__ import annotations

from strom.cluster.features import (
    SAFE_DOWNGRADE,
    SHARE_VERSION,
    UPGRADE,
    FeatureUpdate,
    check_update,
    share_groups_enabled,
)
from strom.protocol.errors import ErrorCode

Brokers = list[tuple[int, tuple[int, int] | None]]
BOTH: Brokers = [(1, (0, 1)), (2, (0, 1))]


def test_share_groups_are_on_at_share_version_1_or_with_group_share_enable() -> None:
    assert share_groups_enabled({SHARE_VERSION: 1}, False)
    assert not share_groups_enabled({}, False)
    assert not share_groups_enabled({SHARE_VERSION: 0}, False)
    assert share_groups_enabled({}, True)


def test_an_upgrade_and_a_safe_downgrade_pass() -> None:
    assert check_update(FeatureUpdate(SHARE_VERSION, 1), {}, BOTH) == (ErrorCode.none, None)
    down = FeatureUpdate(SHARE_VERSION, 0, SAFE_DOWNGRADE)
    assert check_update(down, {SHARE_VERSION: 1}, BOTH) == (ErrorCode.none, None)


def _refused(update: FeatureUpdate, finalized: dict[str, int], brokers: Brokers) -> str:
    code, message = check_update(update, finalized, brokers)
    assert code == ErrorCode.invalid_update_version
    assert message is not None and "\n" not in message
    return message


def test_what_an_update_may_not_do() -> None:
    assert "Unknown feature" in _refused(FeatureUpdate("nope.version", 1), {}, BOTH)
    assert "metadata.version" in _refused(FeatureUpdate("metadata.version", 30), {}, BOTH)
    assert "outside" in _refused(FeatureUpdate(SHARE_VERSION, 2), {}, BOTH)
    # A downgrade must say so; an upgrade must not say it is a downgrade.
    assert "downgrade" in _refused(
        FeatureUpdate(SHARE_VERSION, 0, UPGRADE), {SHARE_VERSION: 1}, BOTH
    )
    assert "upgrade" in _refused(FeatureUpdate(SHARE_VERSION, 1, SAFE_DOWNGRADE), {}, BOTH)
    # A broker that does not support the level (one registered before it knew the
    # feature) holds the upgrade back.
    assert "Broker 3" in _refused(FeatureUpdate(SHARE_VERSION, 1), {}, [*BOTH, (3, None)])
