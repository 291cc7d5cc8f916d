"""The active controller of a controller node: decisions turned into committed records.

Owns, on a node with the controller role, the ``QuorumController`` while this node
leads the metadata quorum: created over the committed image when leadership starts
(the log's next offset is where its records will land), dropped when it ends. Every
change runs as one step: the controller decides over its speculative image, its
records are proposed as one batch, and the caller gets the reply once the batch has
committed and been applied here (``run``). A proposal that fails drops what was
speculated (``reset`` to the committed image). Also:

- a brand-new log starts with the bootstrap records (metadata.version), followed by
  the topics, configs and producer ids of a single-node data directory from before
  the cluster (``strom-metadata.json``, renamed ``.migrated`` once carried over);
- brokers whose heartbeats stopped for ``broker.session.timeout.ms`` are fenced; the
  previous registration of this very node (a combined node restarted after a crash)
  does not have to wait out that timeout to be replaced, other brokers do, as in Kafka;
- with ``auto.leader.rebalance.enable``, every ``leader.imbalance.check.interval.seconds``
  the leadership of partitions goes back to their preferred replicas where a broker
  leads fewer than ``leader.imbalance.per.broker.percentage`` of those it prefers.

Does not own the decisions (``strom.cluster.quorum_controller``), consensus
(``quorum``) or the wire (``controller_handlers``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from strom.cluster import records as mr
from strom.cluster.bootstrap import bootstrap_records, read_legacy
from strom.cluster.controller_api import ControllerConfig, ControllerError, ControllerResult
from strom.cluster.features import BOOTSTRAP_LEVELS
from strom.cluster.meta_properties import bootstrap_scram_records
from strom.cluster.quorum_controller import QuorumController
from strom.controller.quorum import NotLeaderError
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig
    from strom.controller.quorum import QuorumDriver

log = logging.getLogger(__name__)

T = TypeVar("T")
LEGACY_METADATA_FILE = "strom-metadata.json"
FENCE_CHECK_S = 0.25


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class NotControllerError(ControllerError):
    """This node is not the active controller (any more)."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.not_controller, "This node is not the active controller.")


class ControllerService:
    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        state: NodeState,
        quorum: QuorumDriver,
        *,
        own_incarnation: uuid.UUID | None = None,
    ) -> None:
        self.config = config
        # The incarnation of this process's own broker (a combined node), if any.
        self.own_incarnation = own_incarnation
        self.cluster_id = cluster_id
        self.state = state
        self.quorum = quorum
        self.controller: QuorumController | None = None
        self._timer: asyncio.Task[None] | None = None
        self._bootstrap: asyncio.Task[None] | None = None
        self._balancer: asyncio.Task[None] | None = None
        self.active = asyncio.Event()  # set while this node is the active controller
        # A single node's metadata from before the cluster, read now so that a file
        # that cannot be carried over stops the start with one line (LegacyMetadataError).
        self._legacy = config.log_dir / LEGACY_METADATA_FILE
        self._legacy_records, self._legacy_topics = (
            read_legacy(self._legacy, state.node_id) if self._legacy.exists() else ([], 0)
        )

    def leadership_changed(self, leader_ready: bool) -> None:
        """Called by the quorum driver when this node starts or stops leading."""
        if leader_ready:
            self._activate()
        else:
            self._deactivate()

    def stop(self) -> None:
        self._deactivate()

    def _activate(self) -> None:
        self.controller = QuorumController(
            self.state.image,
            ControllerConfig.from_broker_config(self.config, self.cluster_id),
            now_ms=_now_ms(),
            next_offset=self._log_end_offset(),
        )
        own = self.state.image.brokers.get(self.state.node_id)
        if (
            own is not None
            and self.own_incarnation is not None
            and own.incarnation_id != self.own_incarnation
        ):
            # That registration is this node's before a restart: it is dead for sure.
            self.controller.end_session(self.state.node_id)
        loop = asyncio.get_running_loop()
        self._timer = loop.create_task(self._fence_expired_brokers())
        if self.config["auto.leader.rebalance.enable"]:
            self._balancer = loop.create_task(self._balance_leaders())
        if not self.state.image.features:
            self._bootstrap = loop.create_task(self._write_bootstrap())
        else:
            self.active.set()
        log.info(
            "node %d is the active controller (epoch %d)", self.state.node_id, self.quorum.epoch
        )

    def _deactivate(self) -> None:
        if self.controller is not None:
            log.info("node %d is no longer the active controller", self.state.node_id)
        self.controller = None
        self.active.clear()
        for task in (self._timer, self._bootstrap, self._balancer):
            if task is not None:
                task.cancel()
        self._timer = self._bootstrap = self._balancer = None

    def _log_end_offset(self) -> int:
        node = self.quorum.node
        assert node is not None
        return node.log_end_offset

    # Running a change ---------------------------------------------------------------

    async def run(self, decide: Callable[[QuorumController], ControllerResult[T]]) -> T:
        """The reply of ``decide`` once its records have committed and been applied.

        ControllerError for a refusal (nothing written); NotControllerError when this
        node does not lead, or lost leadership before the records committed."""
        controller = self.controller
        if controller is None:
            raise NotControllerError()
        result = decide(controller)
        if result.records:
            await self._propose(controller, [mr.encode_record(r) for r in result.records])
        return result.response

    async def _propose(self, controller: QuorumController, values: list[bytes]) -> None:
        expected = controller.next_offset - len(values)
        if expected != self._log_end_offset():  # would hand out wrong broker epochs
            log.warning(
                "controller offsets out of step (%d expected, log at %d): resetting",
                expected,
                self._log_end_offset(),
            )
            controller.reset(self.state.image, now_ms=_now_ms(), next_offset=self._log_end_offset())
            raise NotControllerError()
        try:
            # propose() appends before its first await: batches keep the order in
            # which the controller decided them.
            await self.quorum.propose(values)
        except NotLeaderError:
            if self.controller is controller:
                self._deactivate()
            raise NotControllerError() from None

    # Background duties ----------------------------------------------------------------

    async def _write_bootstrap(self) -> None:
        records = bootstrap_records(features=BOOTSTRAP_LEVELS)  # share.version=1, as Kafka 4.2
        records += bootstrap_scram_records(self.config.metadata_log_dir)  # --add-scram
        legacy = self._legacy
        if self._legacy_records and legacy.exists():
            records += self._legacy_records
            log.info(
                "carrying the single-node metadata of %s (%d topic(s)) into the metadata log",
                legacy,
                self._legacy_topics,
            )
        try:
            await self.run(lambda controller: controller.propose(records))
        except ControllerError:
            return  # leadership lost: the next leader writes them
        if legacy.exists():
            legacy.rename(Path(f"{legacy}.migrated"))
        self.active.set()

    async def _balance_leaders(self) -> None:
        interval = max(int(self.config["leader.imbalance.check.interval.seconds"]), 1)
        max_ratio = int(self.config["leader.imbalance.per.broker.percentage"]) / 100
        while True:
            await asyncio.sleep(interval)
            try:
                results = await self.run(
                    lambda c: c.elect_leaders(c.imbalanced_partitions(max_ratio))
                )
            except ControllerError:
                continue
            except Exception:
                log.exception("balancing partition leaders failed")
                continue
            moved = [f"{r.topic}-{r.partition}" for r in results if r.error_code == ErrorCode.none]
            if moved:
                log.info("leadership back to the preferred replica: %s", ", ".join(moved))

    async def _fence_expired_brokers(self) -> None:
        """Fence each broker as its session expires: wake at the earliest deadline (at
        least every FENCE_CHECK_S, for sessions that began since), not on a coarse tick,
        so that a dead broker's partitions move at its session timeout, not up to a tick
        later (a client that looks for the new leader once a second then finds it a
        second sooner)."""
        while True:
            controller = self.controller
            deadline = controller.next_fence_deadline_ms() if controller is not None else None
            delay = FENCE_CHECK_S
            if deadline is not None:
                delay = min(delay, max(0.0, (deadline - _now_ms()) / 1000))
            await asyncio.sleep(delay)
            try:
                fenced = await self.run(lambda c: c.fence_expired(_now_ms()))
            except ControllerError:
                continue
            except Exception:
                log.exception("fencing expired brokers failed")
                continue
            for broker_id in fenced or ():
                log.info("fenced broker %d: no heartbeat within its session timeout", broker_id)
