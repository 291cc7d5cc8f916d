"""Records that start a metadata log: a new cluster's, or a single node's carried over.

Owns ``bootstrap_records`` (the FeatureLevelRecords a brand-new cluster's log begins
with, metadata.version first) and ``records_from_legacy`` (the records that recreate what
the ``strom-metadata.json`` of a single-node Strom from before the cluster holds, in a
cluster where that node holds every replica, keeping topic ids); ``read_legacy`` reads
that file, and a file that cannot be read or understood is one ``LegacyMetadataError``.

Does not own where these records are written or when (the node start-up), nor replaying
them (``strom.cluster.image``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strom.cluster.image import NO_LEADER, ConfigResourceType
from strom.cluster.records import (
    DIRECTORY_MIGRATING,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
)


def bootstrap_records(
    metadata_version: int = METADATA_VERSION_LEVEL, features: Mapping[str, int] | None = None
) -> list[MetadataRecord]:
    """The FeatureLevelRecords a brand-new cluster's log starts with (metadata.version first)."""
    records: list[MetadataRecord] = [
        FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)
    ]
    for name, level in sorted((features or {}).items()):
        if name != METADATA_VERSION_FEATURE and level > 0:
            records.append(FeatureLevelRecord(name=name, feature_level=level))
    return records


class LegacyMetadataError(ValueError):
    """A single node's ``strom-metadata.json`` that cannot be carried over; one line."""


def read_legacy(path: Path, node_id: int) -> tuple[list[MetadataRecord], int]:
    """The records carrying ``path`` over, and its number of topics."""
    try:
        data = json.loads(path.read_text())
        return records_from_legacy(data, node_id), len(data.get("topics", []))
    except OSError as exc:
        raise LegacyMetadataError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise LegacyMetadataError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "restore it from a backup, or move it away to start without its topics"
        ) from None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise LegacyMetadataError(
            f"{path} does not hold a single-node Strom's metadata ({type(exc).__name__}: {exc})"
        ) from None


def records_from_legacy(data: Mapping[str, Any], node_id: int) -> list[MetadataRecord]:
    """Records recreating a single node's ``strom-metadata.json`` in a cluster.

    ``data`` is the parsed JSON (``topics`` with ``name``, ``id``, ``partitions``,
    ``configs``, ``leader_epoch``; ``broker_configs``; ``producer_id_block_end``), as
    the single-node Strom wrote it before the cluster. Topic ids are kept.
    Every partition has the node as its only replica and ISR member, and no leader yet,
    with the leader epoch it had: the node becomes leader (epoch + 1) when it registers
    and is unfenced. The broker overrides become configs of broker ``node_id``.
    """
    topics = [
        (
            t["name"],
            uuid.UUID(str(t["id"])),
            int(t["partitions"]),
            dict(t.get("configs", {})),
            int(t.get("leader_epoch", 0)),
        )
        for t in data.get("topics", [])
    ]
    broker_configs = dict(data.get("broker_configs", {}))
    block_end = int(data.get("producer_id_block_end", 0))
    records: list[MetadataRecord] = []
    for name, topic_id, count, configs, leader_epoch in sorted(topics):
        records.append(TopicRecord(name=name, topic_id=topic_id))
        for key in sorted(configs):
            records.append(
                ConfigRecord(
                    resource_type=int(ConfigResourceType.TOPIC),
                    resource_name=name,
                    name=key,
                    value=configs[key],
                )
            )
        for index in range(count):
            records.append(
                PartitionRecord(
                    partition_id=index,
                    topic_id=topic_id,
                    replicas=(node_id,),
                    isr=(node_id,),
                    leader=NO_LEADER,
                    leader_epoch=leader_epoch,
                    partition_epoch=0,
                    directories=(DIRECTORY_MIGRATING,),
                )
            )
    for key in sorted(broker_configs):
        records.append(
            ConfigRecord(
                resource_type=int(ConfigResourceType.BROKER),
                resource_name=str(node_id),
                name=key,
                value=broker_configs[key],
            )
        )
    if block_end > 0:
        records.append(
            ProducerIdsRecord(broker_id=node_id, broker_epoch=-1, next_producer_id=block_end)
        )
    return records
