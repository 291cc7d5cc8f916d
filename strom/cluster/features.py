"""Feature flags beyond metadata.version, as Kafka's features (KIP-584) version them:
which this node supports, which a new cluster finalizes, and the checks an
UpdateFeatures change passes before the controller writes its FeatureLevelRecord.

- ``share.version`` (Kafka's ShareVersion): 0 leaves share groups (KIP-932) off, 1 turns
  them on; a new cluster finalizes 1, as Kafka 4.2 does (production-ready there). Share
  groups are served when it is 1 or ``group.share.enable`` is true (Kafka's
  isShareGroupProtocolEnabled).

Does not own metadata.version's levels (``strom.cluster.records``), replaying the
records (``strom.cluster.image``), the UpdateFeatures handlers (``strom.broker
.update_features``) or the registration that declares what a node supports
(``strom.broker.controller_client.lifecycle``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.cluster.records import METADATA_VERSION_FEATURE, FeatureLevelRecord
from strom.protocol.errors import ErrorCode

SHARE_VERSION = "share.version"
# The features this node supports besides metadata.version: name -> (min, max) level.
SUPPORTED: dict[str, tuple[int, int]] = {SHARE_VERSION: (0, 1)}
# The levels a brand-new cluster's metadata log finalizes.
BOOTSTRAP_LEVELS: dict[str, int] = {SHARE_VERSION: 1}

# UpdateFeatures' upgrade types (v1+; v0's allow_downgrade is SAFE_DOWNGRADE).
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def share_groups_enabled(finalized: Mapping[str, int], group_share_enable: bool) -> bool:
    """Whether share groups are served: ``share.version`` finalized at 1 or more, or the
    broker's ``group.share.enable``."""
    return group_share_enable or finalized.get(SHARE_VERSION, 0) >= 1


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One feature of an UpdateFeatures request."""

    name: str
    level: int
    upgrade_type: int = UPGRADE


def check_update(
    update: FeatureUpdate,
    finalized: Mapping[str, int],
    brokers: Iterable[tuple[int, tuple[int, int] | None]],
) -> tuple[ErrorCode, str | None]:
    """Whether ``update`` may be finalized: a known feature, a level every registered
    broker supports (``brokers``: id and its supported range of the feature), a
    downgrade only when asked for. NONE, or the error and its one-line message."""
    if update.name == METADATA_VERSION_FEATURE:
        return (
            ErrorCode.invalid_update_version,
            "metadata.version cannot be changed: Strom runs one metadata.version.",
        )
    if update.name not in SUPPORTED:
        return (
            ErrorCode.invalid_update_version,
            f"Unknown feature {update.name!r}: the features are {', '.join(sorted(SUPPORTED))}.",
        )
    low, high = SUPPORTED[update.name]
    if not low <= update.level <= high:
        return (
            ErrorCode.invalid_update_version,
            f"{update.name} level {update.level} is outside the supported range {low}-{high}.",
        )
    current = finalized.get(update.name, 0)
    if update.level < current and update.upgrade_type == UPGRADE:
        return (
            ErrorCode.invalid_update_version,
            f"Can't downgrade {update.name} from {current} to {update.level} without "
            f"setting the upgrade type to safe or unsafe downgrade.",
        )
    if update.level > current and update.upgrade_type != UPGRADE:
        return (
            ErrorCode.invalid_update_version,
            f"{update.name} {current} to {update.level} is an upgrade, not a downgrade.",
        )
    for broker_id, supported in brokers:
        found_low, found_high = supported if supported is not None else (0, 0)
        if update.level != 0 and not found_low <= update.level <= found_high:
            return (
                ErrorCode.invalid_update_version,
                f"Broker {broker_id} does not support {update.name} level {update.level} "
                f"(it supports {found_low}-{found_high}).",
            )
    return ErrorCode.none, None


def level_record(update: FeatureUpdate) -> FeatureLevelRecord:
    """The record that finalizes ``update`` (level 0 takes the feature out)."""
    return FeatureLevelRecord(name=update.name, feature_level=update.level)
