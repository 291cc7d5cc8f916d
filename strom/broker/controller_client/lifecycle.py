"""A broker's standing with the active controller: registration, heartbeats, shutdown.

Owns, for a node with the broker role, what Kafka's BrokerLifecycleManager does:
registering with the active controller (BrokerRegistration with a new incarnation id
per process, its client listeners, rack and supported features), heartbeating every
``broker.heartbeat.interval.ms`` with the offset of the metadata it has applied
(BrokerHeartbeat; the controller unfences the broker once it has caught up, and fences
it when heartbeats stop for ``broker.session.timeout.ms``), registering again when the
controller no longer knows it, and a controlled shutdown (heartbeats asking to shut
down until the controller has moved leadership away, bounded in time).

Does not own how requests reach the controller (controller_channel) or what the
controller decides (controller_handlers, strom.cluster.quorum_controller).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Protocol

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4 import request as registration
from kio.schema.broker_registration.v4 import response as registration_response
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i64, u16

from strom.broker.common import stop_task
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.node import LocalNode
from strom.cluster.features import SUPPORTED as SUPPORTED_FEATURES
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
METADATA_VERSION_FEATURE = ("metadata.version", 1, 27)  # name, min, max supported
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0


class RegisteringNode(LocalNode, Protocol):
    """What registration reads of the node beside who it is: each listener's security
    protocol, as the registration advertises it."""

    def security_protocol(self, listener_name: str) -> str: ...


class BrokerLifecycle:
    def __init__(self, broker: RegisteringNode) -> None:
        self.broker = broker
        self.config = broker.config
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self.unfenced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.interval_s = self.config["broker.heartbeat.interval.ms"] / 1000

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_unfenced(self) -> None:
        await self.unfenced.wait()

    async def _register(self) -> None:
        broker = self.broker
        listeners = tuple(
            registration.Listener(
                name=listener.name,
                host=listener.host or "127.0.0.1",
                port=u16(listener.port),
                security_protocol=i16(
                    SECURITY_PROTOCOLS.get(broker.security_protocol(listener.name), 0)
                ),
            )
            for listener in broker.advertised_client_listeners()
        )
        request = registration.BrokerRegistrationRequest(
            broker_id=BrokerId(broker.node_id),
            cluster_id=broker.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=listeners,
            features=(
                registration.Feature(
                    name=METADATA_VERSION_FEATURE[0],
                    min_supported_version=i16(METADATA_VERSION_FEATURE[1]),
                    max_supported_version=i16(METADATA_VERSION_FEATURE[2]),
                ),
                *(
                    registration.Feature(
                        name=name, min_supported_version=i16(low), max_supported_version=i16(high)
                    )
                    for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
                ),
            ),
            rack=self.config["broker.rack"],
            log_dirs=(),
            previous_broker_epoch=i64(self.broker_epoch),
        )
        while True:
            try:
                response: registration_response.BrokerRegistrationResponse = (
                    await broker.controller_channel.call(request, self.interval_s * 5)
                )
            except ControllerUnavailable:
                log.info("waiting for an active controller to register with")
                continue
            if response.error_code == ErrorCode.none:
                self.broker_epoch = response.broker_epoch
                log.info("registered with the controller, broker epoch %d", self.broker_epoch)
                return
            log.info("broker registration refused: %s; trying again", response.error_code.name)
            await asyncio.sleep(self.interval_s)

    async def _heartbeat(self, want_shut_down: bool = False) -> tuple[ErrorCode, bool, bool]:
        request = BrokerHeartbeatRequest(
            broker_id=BrokerId(self.broker.node_id),
            broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(self.broker.quorum.applied_offset - 1),
            want_fence=False,
            want_shut_down=want_shut_down,
            offline_log_dirs=(),
        )
        response: BrokerHeartbeatResponse = await self.broker.controller_channel.call(
            request, self.interval_s * 2
        )
        return response.error_code, response.is_fenced, response.should_shut_down

    async def _run(self) -> None:
        await self._register()
        while True:
            try:
                error, fenced, _ = await self._heartbeat()
            except ControllerUnavailable:
                await asyncio.sleep(self.interval_s / 4)
                continue
            if error in (ErrorCode.broker_id_not_registered, ErrorCode.stale_broker_epoch):
                log.warning("the controller lost this broker's registration: registering again")
                self.broker_epoch = -1
                await self._register()
                continue
            if error == ErrorCode.none:
                if fenced != self.fenced:
                    state = "fenced" if fenced else "unfenced"
                    log.info("broker %d is %s", self.broker.node_id, state)
                self.fenced = fenced
                if not fenced:
                    self.unfenced.set()
                    await asyncio.sleep(self.interval_s)
                    continue
            # fenced or an error: catch up and ask again soon
            await asyncio.sleep(min(self.interval_s, 0.05 if fenced else self.interval_s))

    async def shutdown(self) -> None:
        """Controlled shutdown: ask the controller to move leadership away, then stop."""
        if self._task is not None:
            await stop_task(self._task, "the broker's heartbeat")
        if self.broker_epoch < 0:
            return
        deadline = asyncio.get_running_loop().time() + CONTROLLED_SHUTDOWN_TIMEOUT_S
        while asyncio.get_running_loop().time() < deadline:
            try:
                error, _, should_shut_down = await self._heartbeat(want_shut_down=True)
            except (ControllerUnavailable, Exception):
                return
            if error != ErrorCode.none or should_shut_down:
                return
            await asyncio.sleep(0.05)
