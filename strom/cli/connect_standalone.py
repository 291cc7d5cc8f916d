"""``strom connect-standalone``: a standalone Kafka Connect worker, as Kafka's
``connect-standalone.sh`` starts one (``strom.cli.connect_worker`` runs it)."""

from __future__ import annotations

from typing import Any

from strom.cli.connect_worker import add_worker_parser


def add_parser(commands: Any) -> None:
    add_worker_parser(commands, "connect-standalone")
