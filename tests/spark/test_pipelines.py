"""The example pipelines under examples/pipelines/, run with Trigger.AvailableNow against
a real broker: what they write is read back with confluent-kafka and checked against
what the test computes from its own input.

Each runs on the shared local[2] session. The stream-stream join (a shuffle, state kept
across micro-batches, two sources and a sink) runs once more, after all other tests, on a
standalone Spark cluster, a master and a worker process whose executor is a JVM of its
own, to show that nothing depends on local mode; the other pipelines use the same source
and sink, so running them there too cost CI minutes and showed nothing more.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from kafka_helpers import consume_to_end, create_topic
from spark_helpers import produce

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "pipelines"))

import filter_map  # noqa: E402
import fraud_detection  # noqa: E402
import joins  # noqa: E402
import windowed_counts  # noqa: E402

BASE_TS = 1_700_000_040_000  # a multiple of a minute


@pytest.fixture(params=["local", pytest.param("cluster", marks=pytest.mark.spark_cluster)])
def spark_anywhere(request: pytest.FixtureRequest, spark_sessions: Any) -> Any:
    """The local[2] session, or the session on the standalone cluster (see conftest.py)."""
    if request.param == "cluster":
        return request.getfixturevalue("spark_on_cluster")
    return spark_sessions.local()


def _topics(broker, *names: str, partitions: int = 2) -> list[str]:
    suffix = uuid.uuid4().hex[:8]
    topics = [f"{name}-{suffix}" for name in names]
    for topic in topics:
        create_topic(broker.bootstrap, topic, partitions)
    return topics


def _run(queries) -> None:
    for query in queries:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        assert not query.isActive


def _values(broker, topic: str) -> list[dict]:
    return [json.loads(m.value()) for m in consume_to_end(broker.bootstrap, topic)]


def test_filter_map(spark, broker, tmp_path: Path) -> None:
    source, sink = _topics(broker, "events", "purchases")
    events = [
        {
            "user": f"u{i % 5}",
            "action": ["view", "purchase"][i % 2],
            "amount": i * 0.75,
            "ts": BASE_TS + i,
        }
        for i in range(60)
    ]
    produce(
        broker.bootstrap,
        source,
        [{"value": json.dumps(e).encode()} for e in events] + [{"value": b"not json"}],
    )
    _run(
        filter_map.start(
            spark,
            broker.bootstrap,
            checkpoint_dir=tmp_path,
            available_now=True,
            source=source,
            sink=sink,
            min_amount=10.0,
        )
    )
    want = sorted(
        (e["user"], round(e["amount"] * 100), e["ts"])
        for e in events
        if e["action"] == "purchase" and e["amount"] >= 10.0
    )
    got = sorted((v["user"], v["amount_cents"], v["ts"]) for v in _values(broker, sink))
    assert got == want and want


def test_windowed_counts_tumbling_sliding_session(spark, broker, tmp_path: Path) -> None:
    source, sink = _topics(broker, "clicks", "click-counts")
    # page "home": clicks every 7 s for 3 minutes; "about": two bursts 2 minutes apart
    clicks = [("home", BASE_TS + i * 7_000) for i in range(26)]
    clicks += [("about", BASE_TS + 5_000 + i * 2_000) for i in range(4)]
    clicks += [("about", BASE_TS + 125_000 + i * 2_000) for i in range(3)]
    last = max(ts for _, ts in clicks)
    closer = ("zzz", last + 10 * 60_000)  # moves the watermark past every window
    produce(
        broker.bootstrap,
        source,
        [{"key": p.encode(), "value": b"", "timestamp": ts} for p, ts in clicks + [closer]],
    )
    _run(
        windowed_counts.start(
            spark,
            broker.bootstrap,
            checkpoint_dir=tmp_path,
            available_now=True,
            source=source,
            sink=sink,
            size="1 minute",
            slide="30 seconds",
            gap="30 seconds",
            delay="10 seconds",
        )
    )

    got = Counter()
    for v in _values(broker, sink):
        if v["page"] != "zzz":
            got[(v["kind"], v["page"], v["start"], v["end"])] += v["count"]
    want = Counter()
    minute = 60_000
    for page, ts in clicks:
        start = ts - ts % minute
        want[("tumbling", page, start, start + minute)] += 1
        for s in (start - 30_000, start, start + 30_000):
            if s <= ts < s + minute:
                want[("sliding", page, s, s + minute)] += 1
    for page in ("home", "about"):  # sessions: runs of clicks less than 30 s apart
        times = sorted(ts for p, ts in clicks if p == page)
        begin = prev = times[0]
        count = 1
        for ts in times[1:]:
            if ts - prev >= 30_000:
                want[("session", page, begin, prev + 30_000)] += count
                begin, count = ts, 0
            prev = ts
            count += 1
        want[("session", page, begin, prev + 30_000)] += count
    assert got == want


def test_stream_stream_join_and_table_enrichment(spark_anywhere, broker, tmp_path: Path) -> None:
    spark = spark_anywhere
    impressions, clicks, attributed, orders, customers, enriched = _topics(
        broker, "impressions", "clicks", "attributed", "orders", "customers", "enriched"
    )
    shown = [("a1", "u1", BASE_TS), ("a2", "u2", BASE_TS + 1_000), ("a3", "u3", BASE_TS + 2_000)]
    clicked = [
        ("a1", "u1", BASE_TS + 20_000),  # within a minute: attributed
        ("a2", "u2", BASE_TS + 1_000 + 5 * 60_000),  # too late
        ("a3", "u9", BASE_TS + 3_000),  # another user
    ]
    closer = ("zz", "zz", BASE_TS + 60 * 60_000)

    def ad(a, u, ts):
        return {
            "key": a.encode(),
            "value": json.dumps({"ad": a, "user": u}).encode(),
            "timestamp": ts,
        }

    produce(broker.bootstrap, impressions, [ad(*x) for x in shown + [closer]])
    produce(broker.bootstrap, clicks, [ad(*x) for x in clicked + [closer]])
    produce(
        broker.bootstrap,
        customers,
        [
            {"key": b"c1", "value": json.dumps({"name": "Ana", "tier": "silver"}).encode()},
            {"key": b"c2", "value": json.dumps({"name": "Bo", "tier": "gold"}).encode()},
            {"key": b"c1", "value": json.dumps({"name": "Ana", "tier": "gold"}).encode()},
            {"key": b"c3", "value": json.dumps({"name": "Cy", "tier": "new"}).encode()},
            {"key": b"c3", "value": None},  # deleted
        ],
    )
    produce(
        broker.bootstrap,
        orders,
        [
            {"value": json.dumps({"order": f"o{i}", "customer": f"c{i % 4}", "amount": i}).encode()}
            for i in range(8)
        ],
    )
    _run(
        joins.start(
            spark,
            broker.bootstrap,
            checkpoint_dir=tmp_path,
            available_now=True,
            impressions=impressions,
            clicks=clicks,
            attributed=attributed,
            within="1 minute",
            orders=orders,
            customers=customers,
            enriched=enriched,
        )
    )

    pairs = sorted(
        (v["ad"], v["user"], v["clicked"] - v["shown"]) for v in _values(broker, attributed)
    )
    assert pairs == [("a1", "u1", 20_000), ("zz", "zz", 0)]
    profiles = {"c1": ("Ana", "gold"), "c2": ("Bo", "gold")}
    got = sorted(
        (v["order"], v["customer"], v.get("name"), v.get("tier")) for v in _values(broker, enriched)
    )
    want = sorted(
        (f"o{i}", f"c{i % 4}", *profiles.get(f"c{i % 4}", (None, None))) for i in range(8)
    )
    assert got == want


def test_fraud_detection(spark, broker, tmp_path: Path) -> None:
    transactions, alerts = _topics(broker, "transactions", "fraud-alerts")
    txs = []
    for i in range(20):  # ordinary card: one small purchase a minute, at home
        txs.append(("c-ok", 20.0 + i, "DE", BASE_TS + i * 60_000))
    txs += [("c-burst", 9.99, "DE", BASE_TS + 1_000 + i * 5_000) for i in range(6)]
    txs += [("c-big", 2500.0, "FR", BASE_TS + 3_000)]
    txs += [("c-travel", 30.0, "DE", BASE_TS + 10_000), ("c-travel", 31.0, "BR", BASE_TS + 70_000)]
    produce(
        broker.bootstrap,
        transactions,
        [
            {
                "key": card.encode(),
                "timestamp": ts,
                "value": json.dumps(
                    {"card": card, "amount": amount, "merchant": "m", "country": country, "ts": ts}
                ).encode(),
            }
            for card, amount, country, ts in txs
        ],
    )
    _run(
        fraud_detection.start(
            spark,
            broker.bootstrap,
            checkpoint_dir=tmp_path,
            available_now=True,
            transactions=transactions,
            alerts=alerts,
            large=1000.0,
            burst=5,
            window="1 minute",
            travel_window="10 minutes",
            delay="1 minute",
        )
    )
    found = {(v["card"], v["pattern"]) for v in _values(broker, alerts)}
    assert found == {("c-burst", "velocity"), ("c-big", "large_amount"), ("c-travel", "geo_spread")}
    burst = [v for v in _values(broker, alerts) if v["pattern"] == "velocity"]
    assert max(v["detail"]["transactions"] for v in burst) == 6
