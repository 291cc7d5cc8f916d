"""Which seeds a simulation test runs: the default count per scenario, or
``STROM_SIM_SEEDS=N`` per scenario, or only ``STROM_SIM_SEED=N``; cut into chunks so
that the two test workers share them. Scenarios of one file take disjoint ranges (a
million seeds apart from ``first_seed``), so each run is a different world."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

CHUNK = 50


def seed_chunks(
    scenarios: Mapping[str, tuple[Any, int]], first_seed: int = 0
) -> list[tuple[str, int, int]]:
    """(scenario, first seed, last seed + 1) for every chunk of every scenario."""
    only = os.environ.get("STROM_SIM_SEED")
    chunks = []
    for index, (name, (_, default)) in enumerate(scenarios.items()):
        if only is not None:
            chunks.append((name, int(only), int(only) + 1))
            continue
        total = int(os.environ.get("STROM_SIM_SEEDS", default))
        offset = first_seed + index * 1_000_000
        chunks += [
            (name, offset + start, offset + min(start + CHUNK, total))
            for start in range(0, total, CHUNK)
        ]
    return chunks
