"""How a node reaches the active controller: in process when it is the active
controller, otherwise over the controller listener of the quorum's leader.

Owns forwarding: a request served by the controller (CreateTopics, DeleteTopics,
CreatePartitions, config changes, DescribeQuorum, broker registration and heartbeats,
producer id blocks) is handed to the controller-listener handler of the same API and
version, here or on the leader, and its response comes back as it is, so the client
sees the controller's answer. While no leader is known, the leader cannot be reached,
or it answers NOT_CONTROLLER (it has just lost leadership), the request waits and is
sent again, up to the request's own timeout (``timeout_ms`` where the API has one) or
FORWARD_TIMEOUT_S; then ``ControllerUnavailable``.

Does not own what the controller does (controller_handlers) or consensus (quorum).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import logging
import time
from typing import Any

from strom.broker.network.peer_client import PeerError, PeerPool
from strom.broker.network.router import CONTROLLER_ROUTES, NodeServices, RequestContext
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.05


class ControllerUnavailable(Exception):
    """No active controller answered before the deadline."""


def _not_controller(response: Any) -> bool:
    """Whether the response (or any entry of it) says NOT_CONTROLLER."""
    if getattr(response, "error_code", None) == ErrorCode.not_controller:
        return True
    for item in dataclasses.fields(response):
        value = getattr(response, item.name)
        if isinstance(value, tuple) and any(
            getattr(entry, "error_code", None) == ErrorCode.not_controller for entry in value
        ):
            return True
    return False


class ControllerChannel:
    def __init__(self, broker: NodeServices, voters: dict[int, tuple[str, int]]) -> None:
        self.broker = broker
        self.voters = voters
        self.peers = PeerPool(f"strom-node-{broker.node_id}", broker.controller_security)

    def close(self) -> None:
        self.peers.close()

    def _is_local(self) -> bool:
        service = self.broker.controller_service
        return service is not None and service.active.is_set()

    async def forward(self, ctx: RequestContext | None, request: Any) -> Any:
        """The active controller's response to ``request`` (same API and version)."""
        timeout = getattr(request, "timeout", None)
        budget = FORWARD_TIMEOUT_S
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            budget = timeout.total_seconds()
        return await self.call(request, budget)

    async def call(self, request: Any, budget_s: float) -> Any:
        deadline = time.monotonic() + budget_s
        while True:
            response = None
            if self._is_local():
                response = await self._local(request)
            else:
                leader = self.broker.quorum.leader_id
                address = self.voters.get(leader)
                if address is not None and leader != self.broker.node_id:
                    remaining = max(0.05, deadline - time.monotonic())
                    try:
                        response = await self.peers.request(
                            address[0], address[1], request, remaining
                        )
                    except PeerError as exc:
                        log.debug("forwarding to controller %d failed: %s", leader, exc)
            if response is not None and not _not_controller(response):
                return response
            if time.monotonic() >= deadline:
                raise ControllerUnavailable(f"no active controller answered within {budget_s:g}s")
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _local(self, request: Any) -> Any:
        api_key = int(type(request).__api_key__)
        version = int(type(request).__version__)
        codec = codec_for(api_key, version)
        ctx = RequestContext(
            self.broker, api_key, version, 0, None, codec, "local", CONTROLLER_ROUTES
        )
        result = CONTROLLER_ROUTES[api_key].handler(ctx, request)
        if inspect.isawaitable(result):
            result = await result
        return result
