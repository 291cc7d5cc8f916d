"""The console's memory of the recent past: a bounded series of samples per key (a
group's lag, a topic's end offset), for charts of lag over time and of throughput.

Owns keeping at most ``max_points`` samples per series and dropping series not seen in
the last sampling (deleted topics, gone groups). Sans-I/O: the app samples, this keeps.
"""

from __future__ import annotations

from collections import deque


class History:
    def __init__(self, max_points: int = 360) -> None:
        self.max_points = max_points
        self.series: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def record(self, at: float, values: dict[tuple[str, str], float]) -> None:
        """One sampling: ``values`` by key at time ``at``; series absent from it end."""
        for key in list(self.series):
            if key not in values:
                del self.series[key]
        for key, value in values.items():
            points = self.series.get(key)
            if points is None:
                points = self.series[key] = deque(maxlen=self.max_points)
            points.append((at, value))

    def points(self, key: tuple[str, str]) -> list[tuple[float, float]]:
        return list(self.series.get(key, ()))

    def rates(self, key: tuple[str, str]) -> list[tuple[float, float]]:
        """Per-second increase between consecutive samples of a growing counter."""
        points = self.points(key)
        return [
            (t1, max(0.0, (v1 - v0) / (t1 - t0)))
            for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False)
            if t1 > t0
        ]

    def latest_rate(self, key: tuple[str, str]) -> float | None:
        rates = self.rates(key)
        return rates[-1][1] if rates else None
