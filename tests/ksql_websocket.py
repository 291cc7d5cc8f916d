"""ksqlDB's websocket query endpoint (``/ws/query``) spoken to with aiohttp's websocket
client, as Control Center and ksqlDB's older clients speak to it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


def ws_query(
    url: str,
    ksql: str,
    properties: dict[str, Any] | None = None,
    *,
    params: dict[str, str] | None = None,
    close_after: int | None = None,
) -> tuple[list[str], int | None, str]:
    """A query on ``/ws/query`` with aiohttp's websocket client: the text messages, and
    the close frame's code and reason (None when the client closed after
    ``close_after`` messages)."""

    async def run() -> tuple[list[str], int | None, str]:
        request = json.dumps({"ksql": ksql, "streamsProperties": properties or {}})
        query = {"request": request} if params is None else params
        messages: list[str] = []
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{url}/ws/query", params=query) as ws:
                while True:
                    message = await ws.receive(timeout=120)
                    if message.type == aiohttp.WSMsgType.TEXT:
                        messages.append(message.data)
                        if close_after is not None and len(messages) >= close_after:
                            await ws.close()
                            return messages, None, ""
                    elif message.type == aiohttp.WSMsgType.CLOSE:
                        return messages, message.data, message.extra
                    else:
                        raise AssertionError(f"unexpected {message.type}")

    return asyncio.run(run())
