"""The node's metrics: counters kept on the hot path, and the Prometheus collector that
turns them and the node's state into Kafka's metric names at scrape time.

Owns:
- ``BrokerMetrics``: plain counters, no locks (one event loop updates them): records
  and bytes appended per topic (counted per batch from the batch headers, never per
  record), bytes fetched by consumers per topic, requests per API and version with
  their total time, queue time and throttle time in small histograms of fixed buckets, ISR
  shrinks and expands. It exists only while the admin listener is configured
  (``admin.listeners``): without it a request pays one ``None`` check.
- ``KafkaCollector``: builds, at each scrape, the families Kafka users already scrape
  (the Prometheus JMX exporter's usual names for Kafka's MBeans, and kafka_exporter's
  for consumer lag) from those counters and from what the node holds: partitions it
  leads and their ISR, its logs, its connections, purgatory waiters, the active
  controller's view of the cluster, the committed offsets of the groups it
  coordinates, and its share groups (kafka_exporter-style ``kafka_sharegroup_*``:
  members, and start offset and lag of each share-partition whose topic partition it
  leads; records acknowledged by type, as Kafka's share-group-metrics count them).
  Quantiles of request times come from the histogram, whose counts halve every minute
  so that they follow recent traffic, as Kafka's decaying histograms do.

Also the node's readiness check (``readiness``), which the admin listener serves.

Does not own the HTTP listener (``strom.services.admin_http``) or the text format
(``prometheus_client``).
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from strom.broker.network.loop_lag import LoopLagProbe
from strom.broker.network.router import NodeServices

if TYPE_CHECKING:
    from strom.broker.controller_client.lifecycle import BrokerLifecycle
    from strom.broker.network.router import RequestContext
    from strom.config import Listener


class ObservedNode(NodeServices, Protocol):
    """What a scrape and the readiness check read of the node beside a handler's view:
    the listeners bound, the connections open on each, whether the client listeners
    serve, and the broker's registration."""

    @property
    def bound(self) -> list[Listener]: ...

    @property
    def serving_clients(self) -> bool: ...

    @property
    def lifecycle(self) -> BrokerLifecycle | None: ...

    def connections_per_listener(self) -> dict[str, int]: ...


FETCH = 1
# Upper bounds (ms) of the request time buckets; the last bucket is open.
BUCKETS_MS = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500,
    1000, 2500, 5000, 10000, 30000, 60000,
)  # fmt: skip
QUANTILES = (("0.50", 0.5), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99),
             ("0.999", 0.999))  # fmt: skip
DECAY_S = 60.0


def _request_name(ctx: RequestContext, follower: bool) -> str:
    """Kafka's request name for metrics: ``ProduceRequest`` -> ``Produce``; fetches are
    FetchConsumer or FetchFollower."""
    if ctx.api_key == FETCH:
        return "FetchFollower" if follower else "FetchConsumer"
    name = _NAMES.get(ctx.api_key)
    if name is None:
        name = _NAMES[ctx.api_key] = ctx.codec.request_type.__name__.removesuffix("Request")
    return name


_NAMES: dict[int, str] = {}


class Histogram:
    """Counts of values in ``BUCKETS_MS`` (quantiles by interpolation in a bucket), and
    the count and sum of every value since start."""

    __slots__ = ("counts", "total_count", "total_sum")

    def __init__(self) -> None:
        self.counts = [0.0] * (len(BUCKETS_MS) + 1)
        self.total_count = 0
        self.total_sum = 0.0

    def add(self, value_ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, value_ms)] += 1
        self.total_count += 1
        self.total_sum += value_ms

    def halve(self) -> None:
        self.counts = [c / 2 for c in self.counts]

    def quantile(self, q: float) -> float:
        total = sum(self.counts)
        if total <= 0:
            return 0.0
        rank = q * total
        seen = 0.0
        for index, count in enumerate(self.counts):
            if count and seen + count >= rank:
                low = BUCKETS_MS[index - 1] if index > 0 else 0.0
                high = BUCKETS_MS[index] if index < len(BUCKETS_MS) else BUCKETS_MS[-1] * 2
                return low + (high - low) * (rank - seen) / count
            seen += count
        return BUCKETS_MS[-1]


class BrokerMetrics:
    """Counters the request path adds to; read by ``KafkaCollector``."""

    def __init__(self) -> None:
        self.messages_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_out: defaultdict[str, int] = defaultdict(int)
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.total_time: dict[str, Histogram] = {}
        self.queue_time: dict[str, Histogram] = {}
        self.throttle_time: dict[str, Histogram] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_authentications = 0
        self.loop_lag = LoopLagProbe()
        self.cold_reads = 0  # fetches' reads of bytes not in the page cache, warmed first
        self.cold_read_bytes = 0
        self._decayed = time.monotonic()

    def appended(self, topic: str, headers: Iterable[Any]) -> None:
        """A produce appended these batches to ``topic`` (per batch, not per record)."""
        size = records = 0
        for header in headers:
            size += header.size
            records += header.record_count
        self.messages_in[topic] += records
        self.bytes_in[topic] += size

    def request_done(self, ctx: RequestContext, request: Any, response: Any) -> None:
        """A request answered (or, acks=0, handled): its count, time and throttle, and
        for a consumer's fetch the bytes it carries out."""
        elapsed_ms = (time.perf_counter_ns() - ctx.started_ns) / 1e6
        follower = False
        if ctx.api_key == FETCH:
            follower = getattr(request, "replica_id", -1) >= 0 or (
                getattr(getattr(request, "replica_state", None), "replica_id", -1) >= 0
            )
            if not follower and response is not None:
                self._fetched(ctx, response)
        name = _request_name(ctx, follower)
        self.requests[(name, ctx.api_version)] += 1
        histogram = self.total_time.get(name)
        if histogram is None:
            histogram = self.total_time[name] = Histogram()
        histogram.add(elapsed_ms)
        queued = self.queue_time.get(name)
        if queued is None:
            queued = self.queue_time[name] = Histogram()
        queued.add(ctx.queued_ns / 1e6)
        throttle = getattr(response, "throttle_time", None)
        if throttle:
            throttled = self.throttle_time.get(name)
            if throttled is None:
                throttled = self.throttle_time[name] = Histogram()
            throttled.add(throttle.total_seconds() * 1000)

    def _fetched(self, ctx: RequestContext, response: Any) -> None:
        state = ctx.broker.state
        for topic in response.responses:
            name = getattr(topic, "topic", None)
            if not name:
                view = state.topic_by_id(topic.topic_id)
                if view is None:
                    continue
                name = view.name
            size = 0
            for partition in topic.partitions:
                if partition.records:
                    size += len(partition.records)
            if size:
                self.bytes_out[name] += size

    def decay(self) -> None:
        """Halve the request histograms once a minute (called at scrape time)."""
        now = time.monotonic()
        while now - self._decayed >= DECAY_S:
            self._decayed += DECAY_S
            for histogram in (
                *self.total_time.values(),
                *self.queue_time.values(),
                *self.throttle_time.values(),
            ):
                histogram.halve()


def _family(name: str, doc: str, kind: str) -> Metric:
    return Metric(name, doc, kind)


class KafkaCollector(Collector):
    """Kafka's metric names, computed from the node at each scrape."""

    def __init__(self, broker: ObservedNode, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        self.metrics.decay()
        yield from self._topic_metrics()
        yield from self._request_metrics()
        yield from self._replica_metrics()
        yield from self._log_metrics()
        yield from self._network_metrics()
        yield from self._controller_metrics()
        yield from self._lag_metrics()
        yield from self._share_group_metrics()
        yield from self._loop_metrics()

    # kafka.server:type=BrokerTopicMetrics ---------------------------------------------

    def _topic_metrics(self) -> Iterator[Metric]:
        m = self.metrics
        for short, doc, values in (
            ("messagesin", "Records appended by producers", m.messages_in),
            ("bytesin", "Bytes of record batches appended by producers", m.bytes_in),
            ("bytesout", "Bytes of record batches fetched by consumers", m.bytes_out),
        ):
            name = f"kafka_server_brokertopicmetrics_{short}"
            family = _family(name, doc, "counter")
            family.add_sample(f"{name}_total", {}, float(sum(values.values())))
            for topic, value in sorted(values.items()):
                family.add_sample(f"{name}_total", {"topic": topic}, float(value))
            yield family

    # kafka.network:type=RequestMetrics ------------------------------------------------

    def _request_metrics(self) -> Iterator[Metric]:
        m = self.metrics
        requests = _family("kafka_network_requestmetrics_requests", "Requests answered", "counter")
        for (request, version), count in sorted(m.requests.items()):
            requests.add_sample(
                "kafka_network_requestmetrics_requests_total",
                {"request": request, "version": str(version)},
                float(count),
            )
        yield requests
        for short, doc, histograms in (
            ("totaltimems", "Time from a request's handling to its answer, ms", m.total_time),
            (
                "requestqueuetimems",
                "Time a request waited behind those read with it, ms",
                m.queue_time,
            ),
            ("throttletimems", "Quota throttle time given to clients, ms", m.throttle_time),
        ):
            name = f"kafka_network_requestmetrics_{short}"
            family = _family(name, doc, "summary")
            for request, histogram in sorted(histograms.items()):
                for label, q in QUANTILES:
                    family.add_sample(
                        name, {"request": request, "quantile": label}, histogram.quantile(q)
                    )
                labels = {"request": request}
                family.add_sample(f"{name}_count", labels, float(histogram.total_count))
                family.add_sample(f"{name}_sum", labels, histogram.total_sum)
            yield family

    # kafka.server:type=ReplicaManager ---------------------------------------------------

    def _replica_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        state = broker.state
        node = broker.node_id
        default_min_isr = int(broker.config["min.insync.replicas"])
        partitions = leaders = under_replicated = under_min_isr = 0
        for view in state.topics.values():
            min_isr = int(view.configs.get("min.insync.replicas", default_min_isr))
            for partition in view.states.values():
                if node in partition.replicas:
                    partitions += 1
                if partition.leader != node:
                    continue
                leaders += 1
                if len(partition.isr) < len(partition.replicas):
                    under_replicated += 1
                if len(partition.isr) < min_isr:
                    under_min_isr += 1
        for short, doc, value in (
            ("underreplicatedpartitions", "Partitions led here with replicas out of the ISR",
             under_replicated),
            ("underminisrpartitioncount", "Partitions led here with an ISR below min.insync",
             under_min_isr),
            ("partitioncount", "Partitions with a replica on this node", partitions),
            ("leadercount", "Partitions led by this node", leaders),
        ):  # fmt: skip
            name = f"kafka_server_replicamanager_{short}"
            family = _family(name, doc, "gauge")
            family.add_sample(name, {}, float(value))
            yield family
        m = self.metrics
        for short, doc, value in (
            ("isrshrinks", "ISR shrinks asked for by this node as leader", m.isr_shrinks),
            ("isrexpands", "ISR expands asked for by this node as leader", m.isr_expands),
        ):
            name = f"kafka_server_replicamanager_{short}"
            family = _family(name, doc, "counter")
            family.add_sample(f"{name}_total", {}, float(value))
            yield family
        purgatory = _family(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Fetches waiting for data (long polls)",
            "gauge",
        )
        purgatory.add_sample(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            {"delayed_operation": "Fetch"},
            float(broker.purgatory.waiting()),
        )
        yield purgatory

    # kafka.log:type=Log -----------------------------------------------------------------

    def _log_metrics(self) -> Iterator[Metric]:
        logs = self.broker.state.logs.all_logs() if self.broker.state.hosts_logs else []
        families = {
            short: _family(f"kafka_log_log_{short}", doc, "gauge")
            for short, doc in (
                ("size", "Bytes of a partition's log on this node"),
                ("logstartoffset", "First offset of a partition's log on this node"),
                ("logendoffset", "Next offset of a partition's log on this node"),
                ("numlogsegments", "Segments of a partition's log on this node"),
            )
        }
        for partition_log in sorted(logs, key=lambda p: (p.topic, p.partition)):
            labels = {"topic": partition_log.topic, "partition": str(partition_log.partition)}
            for short, value in (
                ("size", partition_log.size_bytes),
                ("logstartoffset", partition_log.log_start_offset),
                ("logendoffset", partition_log.log_end_offset),
                ("numlogsegments", len(partition_log.segments())),
            ):
                families[short].add_sample(f"kafka_log_log_{short}", labels, float(value))
        yield from families.values()

    # kafka.server:type=socket-server-metrics --------------------------------------------

    def _network_metrics(self) -> Iterator[Metric]:
        per_listener = self.broker.connections_per_listener()
        name = "kafka_server_socketservermetrics_connections"
        family = _family(name, "Open connections per listener", "gauge")
        for listener in sorted({b.name for b in self.broker.bound} | set(per_listener)):
            family.add_sample(name, {"listener": listener}, float(per_listener.get(listener, 0)))
        yield family
        failed = _family(
            "kafka_server_socketservermetrics_failed_authentication",
            "Failed SASL authentications",
            "counter",
        )
        failed.add_sample(
            "kafka_server_socketservermetrics_failed_authentication_total",
            {},
            float(self.metrics.failed_authentications),
        )
        yield failed

    # kafka.controller:type=KafkaController ----------------------------------------------

    def _controller_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        service = broker.controller_service
        active = service is not None and service.controller is not None
        state = broker.state
        values: dict[str, float] = {"activecontrollercount": 1.0 if active else 0.0}
        if active:
            topics = list(state.topics.values())
            values["globaltopiccount"] = float(len(topics))
            values["globalpartitioncount"] = float(sum(t.partitions for t in topics))
            values["offlinepartitionscount"] = float(
                sum(1 for t in topics for p in t.states.values() if p.leader < 0)
            )
            live = {b.broker_id for b in state.live_brokers()}
            values["activebrokercount"] = float(len(live))
        for short, value in values.items():
            name = f"kafka_controller_kafkacontroller_{short}"
            family = _family(name, f"KafkaController {short}", "gauge")
            family.add_sample(name, {}, value)
            yield family
        if active:
            for short, doc, value in (
                ("leaderelectionrateandtimems", "Partition leader elections",
                 state.leader_elections),
                ("uncleanleaderelectionspersec", "Unclean partition leader elections",
                 state.unclean_leader_elections),
            ):  # fmt: skip
                name = f"kafka_controller_controllerstats_{short}"
                family = _family(name, doc, "counter")
                family.add_sample(f"{name}_total", {}, float(value))
                yield family

    # kafka_exporter: consumer lag and partition offsets -----------------------------------

    def _lag_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        state = broker.state
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        current = _family(
            "kafka_topic_partition_current_offset",
            "High watermark of a partition led by this node",
            "gauge",
        )
        oldest = _family(
            "kafka_topic_partition_oldest_offset",
            "Log start offset of a partition led by this node",
            "gauge",
        )
        for partition_log in sorted(
            state.logs.all_logs() if state.hosts_logs else [],
            key=lambda p: (p.topic, p.partition),
        ):
            key = (partition_log.topic, partition_log.partition)
            ends[key] = (partition_log.high_watermark, partition_log.log_start_offset)
            if not state.leads(*key):
                continue
            labels = {"topic": key[0], "partition": str(key[1])}
            current.add_sample(
                "kafka_topic_partition_current_offset", labels, float(partition_log.high_watermark)
            )
            oldest.add_sample(
                "kafka_topic_partition_oldest_offset",
                labels,
                float(partition_log.log_start_offset),
            )
        yield current
        yield oldest
        lag = _family(
            "kafka_consumergroup_lag", "Messages a group is behind (high watermark - committed)",
            "gauge",
        )  # fmt: skip
        committed = _family(
            "kafka_consumergroup_current_offset", "Committed offset of a group", "gauge"
        )
        members = _family("kafka_consumergroup_members", "Members of a group", "gauge")
        coordinator = broker.coordinator
        for group_id, offsets in sorted(coordinator.offsets.items()):
            for (topic, partition), offset in sorted(offsets.items()):
                labels = {
                    "consumergroup": group_id,
                    "topic": topic,
                    "partition": str(partition),
                }
                committed.add_sample(
                    "kafka_consumergroup_current_offset", labels, float(offset.offset)
                )
                end = ends.get((topic, partition))
                if end is None:
                    continue  # no replica here: its end offset is another node's to report
                behind = max(0, end[0] - max(offset.offset, end[1]))
                lag.add_sample("kafka_consumergroup_lag", labels, float(behind))
        for group in coordinator.list_groups():
            members.add_sample(
                "kafka_consumergroup_members",
                {"consumergroup": group.group_id},
                float(len(getattr(group, "members", ()))),
            )
        yield committed
        yield lag
        yield members

    # share groups (KIP-932) -------------------------------------------------------------

    def _share_group_metrics(self) -> Iterator[Metric]:
        from strom.coordinator.share_group import ShareGroup

        service = self.broker.share_service
        start = _family(
            "kafka_sharegroup_start_offset",
            "Start offset of a share-partition (the first record not yet finished with)",
            "gauge",
        )
        lag = _family(
            "kafka_sharegroup_lag",
            "Records of a share-partition not yet finished with (high watermark - start - "
            "finished past the start)",
            "gauge",
        )
        for group_id, topic, partition, offset, behind in service.held_lags():
            labels = {"sharegroup": group_id, "topic": topic, "partition": str(partition)}
            start.add_sample("kafka_sharegroup_start_offset", labels, float(offset))
            lag.add_sample("kafka_sharegroup_lag", labels, float(behind))
        members = _family("kafka_sharegroup_members", "Members of a share group", "gauge")
        for group in self.broker.coordinator.list_groups():
            if isinstance(group, ShareGroup):
                members.add_sample(
                    "kafka_sharegroup_members",
                    {"sharegroup": group.group_id},
                    float(len(group.members)),
                )
        name = "kafka_server_sharegroupmetrics_recordacknowledgement"
        acknowledged = _family(name, "Records acknowledged by share consumers, by type", "counter")
        for kind, count in service.acknowledged_records.items():
            acknowledged.add_sample(f"{name}_total", {"acktype": kind}, float(count))
        yield start
        yield lag
        yield members
        yield acknowledged

    # the event loop -------------------------------------------------------------------

    def _loop_metrics(self) -> Iterator[Metric]:
        probe = self.metrics.loop_lag
        lag = _family(
            "strom_event_loop_lag_seconds",
            "How late the event loop ran a callback due every 10 ms, seconds",
            "histogram",
        )
        for bound, count in probe.cumulative():
            lag.add_sample("strom_event_loop_lag_seconds_bucket", {"le": bound}, float(count))
        lag.add_sample("strom_event_loop_lag_seconds_count", {}, float(probe.total))
        lag.add_sample("strom_event_loop_lag_seconds_sum", {}, probe.sum_s)
        yield lag
        worst = _family(
            "strom_event_loop_lag_max_seconds", "The event loop's worst lag since start", "gauge"
        )
        worst.add_sample("strom_event_loop_lag_max_seconds", {}, probe.max_s)
        yield worst
        m = self.metrics
        cold = _family(
            "strom_fetch_cold_reads",
            "Fetch reads of log bytes not in the page cache, read in on a thread first",
            "counter",
        )
        cold.add_sample("strom_fetch_cold_reads_total", {}, float(m.cold_reads))
        yield cold
        cold_bytes = _family(
            "strom_fetch_cold_read_bytes", "Bytes those reads brought in", "counter"
        )
        cold_bytes.add_sample("strom_fetch_cold_read_bytes_total", {}, float(m.cold_read_bytes))
        yield cold_bytes


def readiness(broker: ObservedNode) -> tuple[bool, dict[str, Any]]:
    """Whether the node does its part, and each check with what it found."""
    checks: dict[str, Any] = {}
    if broker.is_controller:
        checks["quorum_leader_known"] = broker.quorum.leader_id >= 0
    if broker.is_broker:
        lifecycle = broker.lifecycle
        checks["registered_and_unfenced"] = lifecycle is not None and not lifecycle.fenced
        checks["serving_clients"] = broker.serving_clients
        node = broker.node_id
        roles = broker.replicas.roles
        pending = [
            f"{name}-{index}"
            for name, topic in broker.state.topics.items()
            for index, state in topic.states.items()
            if state.leader == node and roles.get((name, index)) != (node, state.leader_epoch)
        ]
        checks["leading_what_it_should"] = not pending
        if pending:
            checks["leaderships_not_taken_up"] = sorted(pending)[:20]
    ready = all(value for key, value in checks.items() if isinstance(value, bool))
    return ready, checks
