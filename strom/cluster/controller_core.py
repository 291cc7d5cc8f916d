"""What every part of the active controller shares: the speculative image and the offset
the next record takes (``QuorumController``'s state), how records are emitted onto it,
and the rules several parts apply: a partition's change (``partition_change``), whether
an unclean election is allowed, a broker's default log directory.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable

from strom.cluster.controller_api import (
    ControllerConfig,
    ControllerResult,
    T,
)
from strom.cluster.image import (
    MetadataImage,
    TopicImage,
)
from strom.cluster.partition_change import (
    Election,
    PartitionChangeBuilder,
)
from strom.cluster.records import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    MetadataRecord,
)


class ControllerCore:
    """The active controller's state and shared steps; the parts build on it."""

    config: ControllerConfig
    rng: random.Random
    _image: MetadataImage
    _next_offset: int

    @property
    def image(self) -> MetadataImage:
        """The speculative image: committed records and those proposed since."""
        return self._image

    @property
    def next_offset(self) -> int:
        """The offset the next record this controller proposes is expected to take."""
        return self._next_offset

    def _emit(self, out: list[MetadataRecord], records: Iterable[MetadataRecord]) -> None:
        for record in records:
            self._image.apply(record, self._next_offset)
            self._next_offset += 1
            out.append(record)

    def _result(self, records: list[MetadataRecord], response: T) -> ControllerResult[T]:
        return ControllerResult(tuple(records), response)

    def _unclean_allowed(self, topic: str) -> bool:
        """unclean.leader.election.enable: the topic's, else the cluster-wide dynamic
        default, else this controller's own static setting."""
        value = self._image.topic_configs(topic).get("unclean.leader.election.enable")
        if value is None:
            value = self._image.broker_configs(None).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _default_dir(self, broker_id: int) -> uuid.UUID:
        """Kafka's ClusterControlManager.defaultDir."""
        broker = self._image.brokers.get(broker_id)
        if broker is None:
            return DIRECTORY_UNASSIGNED
        if not broker.log_dirs:
            return DIRECTORY_MIGRATING
        if len(broker.log_dirs) == 1:
            return broker.log_dirs[0]
        return DIRECTORY_UNASSIGNED

    def partition_change(
        self,
        topic: TopicImage,
        index: int,
        *,
        election: Election = Election.ONLINE,
        acceptable: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        """A builder over the speculative state; leaders must be active brokers by default."""
        return PartitionChangeBuilder(
            topic.partitions[index],
            topic.topic_id,
            index,
            acceptable or self._image.is_active,
            election=election,
            default_dir=self._default_dir,
        )

    def propose(self, records: Iterable[MetadataRecord]) -> ControllerResult[None]:
        """Apply records built elsewhere (a PartitionChangeBuilder's) to the speculative image."""
        out: list[MetadataRecord] = []
        self._emit(out, records)
        return self._result(out, None)
