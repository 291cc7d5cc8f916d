"""The answers of the metadata statements, in ksqlDB 0.29's shapes: SHOW / LIST STREAMS,
TABLES [EXTENDED], [ALL] TOPICS [EXTENDED], PROPERTIES, QUERIES, FUNCTIONS, TYPES,
VARIABLES; DESCRIBE name [EXTENDED], DESCRIBE STREAMS / TABLES, DESCRIBE FUNCTION.

Owns building each entity from the metastore, the cluster (topics, their replicas and
consumer groups, read with the AdminClient) and the server's settings: topics ksqlDB
hides (``ksql.hidden.topics``' default) are left out unless ALL, and secret property
values are hidden.

Blocking (the AdminClient): call from a worker thread. Does not own the metastore or
executing other statements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.ksql import statements as st
from strom.ksql.config import KsqlServerConfig
from strom.ksql.functions import find_function, function_names_json
from strom.ksql.kafka_calls import TIMEOUT_S, topic_metadata
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore

_HIDDEN_TOPICS = re.compile(
    r"_confluent.*|__confluent.*|_schemas|__consumer_offsets|__transaction_state|"
    r"connect-configs|connect-offsets|connect-status|connect-statuses"
)
# Properties SHOW PROPERTIES lists without their value, as ksqlDB hides secrets.
_SECRET = re.compile(r"password|secret|user\.info|jaas", re.IGNORECASE)


class MetadataStatements:
    def __init__(self, metastore: Metastore, admin: AdminClient, config: KsqlServerConfig) -> None:
        self.metastore = metastore
        self.admin = admin
        self.config = config

    def show(
        self, statement: st.Show, text: str, properties: dict[str, Any], variables: dict[str, str]
    ) -> dict[str, Any]:
        what = statement.what
        if what in ("STREAMS", "TABLES"):
            kind = what[:-1]
            sources = [s for s in self._sorted_sources() if s.kind == kind]
            if statement.extended:
                return self._descriptions(sources, text)
            listed = [
                {
                    "type": s.kind,
                    "name": s.name,
                    "topic": s.topic,
                    "keyFormat": s.key_format,
                    "valueFormat": s.value_format,
                    "isWindowed": s.is_windowed,
                }
                for s in sources
            ]
            return {"@type": what.lower(), "statementText": text, what.lower(): listed,
                    "warnings": []}  # fmt: skip
        if what == "TOPICS":
            return self._topics(text, statement.extended, statement.all_topics)
        if what == "PROPERTIES":
            return self._properties(text, properties)
        if what == "QUERIES":
            return {"@type": "queries", "statementText": text, "queries": [], "warnings": []}
        if what == "FUNCTIONS":
            return function_names_json(text)
        if what == "TYPES":
            types = {name: t.schema_json() for name, t in sorted(self.metastore.types.items())}
            return {"@type": "type_list", "statementText": text, "types": types, "warnings": []}
        if what == "VARIABLES":
            listed = [{"name": n, "value": v} for n, v in variables.items()]
            return {
                "@type": "variables",
                "statementText": text,
                "variables": listed,
                "warnings": [],
            }
        raise KsqlStatementError(f"SHOW {what} is not a metadata statement")

    def _sorted_sources(self) -> list[DataSource]:
        return sorted(self.metastore.sources.values(), key=lambda s: s.name)

    def _topics(self, text: str, extended: bool, show_all: bool) -> dict[str, Any]:
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        names = sorted(
            name for name in metadata.topics if show_all or not _HIDDEN_TOPICS.fullmatch(name)
        )
        consumers = self._consumers_by_topic() if extended else {}
        topics = []
        for name in names:
            partitions = metadata.topics[name].partitions
            info: dict[str, Any] = {
                "name": name,
                "replicaInfo": [len(partitions[p].replicas) for p in sorted(partitions)],
            }
            if extended:
                groups = consumers.get(name, {})
                info["consumerCount"] = sum(groups.values())
                info["consumerGroupCount"] = len(groups)
            topics.append(info)
        kind = "kafka_topics_extended" if extended else "kafka_topics"
        return {"@type": kind, "statementText": text, "topics": topics, "warnings": []}

    def _consumers_by_topic(self) -> dict[str, dict[str, int]]:
        """topic -> {group: members consuming it}."""
        listed = self.admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
        group_ids = [g.group_id for g in listed.valid]
        found: dict[str, dict[str, int]] = {}
        if not group_ids:
            return found
        for future in self.admin.describe_consumer_groups(group_ids).values():
            try:
                group = future.result()
            except KafkaException:
                continue
            for member in group.members:
                assigned = {tp.topic for tp in member.assignment.topic_partitions}
                for topic in assigned:
                    counts = found.setdefault(topic, {})
                    counts[group.group_id] = counts.get(group.group_id, 0) + 1
        return found

    def _server_properties(self) -> dict[str, str]:
        props = {
            "ksql.service.id": self.config.service_id,
            "ksql.streams.bootstrap.servers": self.config.bootstrap_servers,
            "ksql.persistence.default.format.key": self.config.default_key_format,
            "ksql.streams.auto.offset.reset": "latest",
            "ksql.streams.cache.max.bytes.buffering": "10485760",
            "ksql.internal.topic.replicas": str(self.config.internal_topic_replicas),
            "ksql.spark.master": self.config.spark_master,
            "ksql.connect.url": self.config.connect_url,
        }
        if self.config.default_value_format:
            props["ksql.persistence.default.format.value"] = self.config.default_value_format
        if self.config.schema_registry_url:
            props["ksql.schema.registry.url"] = self.config.schema_registry_url
        props.update(self.config.properties)
        return props

    def _properties(self, text: str, properties: dict[str, Any]) -> dict[str, Any]:
        server = self._server_properties()
        # A Kafka Streams setting SET without its prefix is listed under it, as ksqlDB does.
        overrides = {
            (k if k.startswith("ksql.") else "ksql.streams." + k): str(v)
            for k, v in properties.items()
        }
        merged = {**server, **overrides}
        listed = [
            {"name": k, "scope": "KSQL", "value": "[hidden]" if _SECRET.search(k) else v}
            for k, v in sorted(merged.items())
        ]
        overwritten = sorted(k for k in overrides if server.get(k) != merged[k])
        return {
            "@type": "properties",
            "statementText": text,
            "properties": listed,
            "overwrittenProperties": overwritten,
            "defaultProperties": [],
            "warnings": [],
        }

    def _description(self, source: DataSource, extended: bool) -> dict[str, Any]:
        partitions = replication = 0
        if extended:
            topic = topic_metadata(self.admin, source.topic)
            if topic is not None and topic.partitions:
                partitions = len(topic.partitions)
                replication = len(next(iter(topic.partitions.values())).replicas)
        return {
            "name": source.name,
            "windowType": source.window_type,
            "readQueries": [],
            "writeQueries": [],
            "fields": [c.field_json() for c in source.columns],
            "type": source.kind,
            "timestamp": source.timestamp_column or "",
            "statistics": "",
            "errorStats": "",
            "extended": extended,
            "keyFormat": source.key_format,
            "valueFormat": source.value_format,
            "topic": source.topic,
            "partitions": partitions,
            "replication": replication,
            "statement": source.statement,
            "queryOffsetSummaries": [],
            "sourceConstraints": [],
            "clusterStatistics": [],
            "clusterErrorStats": [],
        }

    def _descriptions(self, sources: Iterable[DataSource], text: str) -> dict[str, Any]:
        return {
            "@type": "source_descriptions",
            "statementText": text,
            "sourceDescriptions": [self._description(s, True) for s in sources],
            "warnings": [],
        }

    def describe_source(self, statement: st.DescribeSource, text: str) -> dict[str, Any]:
        source = self.metastore.source(statement.name)
        if source is None:
            raise KsqlStatementError(
                f"Could not find STREAM/TABLE '{statement.name}' in the Metastore"
            )
        return {
            "@type": "sourceDescription",
            "statementText": text,
            "sourceDescription": self._description(source, statement.extended),
            "warnings": [],
        }

    def offset_summaries(
        self, consumed: dict[str, dict[str, dict[int, int]]]
    ) -> list[dict[str, Any]]:
        """ksqlDB's ``queryOffsetSummaries``: for each consumer group (a query), the
        next offset it reads of each partition of each of its topics (0 before it read
        one), with the partition's log start and end offsets."""
        partitions: dict[str, list[int]] = {}
        for topics in consumed.values():
            for topic in topics:
                if topic not in partitions:
                    found = topic_metadata(self.admin, topic)
                    partitions[topic] = sorted(found.partitions) if found is not None else []
        every = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
        starts = self._log_offsets(every, OffsetSpec.earliest())
        ends = self._log_offsets(every, OffsetSpec.latest())
        return [
            {
                "groupId": group,
                "topicSummaries": [
                    {
                        "kafkaTopic": topic,
                        "offsets": [
                            {
                                "partition": p,
                                "logStartOffset": starts.get((topic, p), 0),
                                "logEndOffset": ends.get((topic, p), 0),
                                "consumerOffset": offsets.get(p, 0),
                            }
                            for p in partitions[topic]
                        ],
                    }
                    for topic, offsets in topics.items()
                ],
            }
            for group, topics in consumed.items()
        ]

    def _log_offsets(self, every: list[TopicPartition], spec: OffsetSpec) -> dict[Any, int]:
        if not every:
            return {}
        futures = self.admin.list_offsets({tp: spec for tp in every}, request_timeout=TIMEOUT_S)
        found: dict[Any, int] = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException:
                continue
        return found

    def describe_sources(self, statement: st.DescribeSources, text: str) -> dict[str, Any]:
        sources = [s for s in self._sorted_sources() if s.kind == statement.kind]
        entity = self._descriptions(sources, text)
        if not statement.extended:
            for description in entity["sourceDescriptions"]:
                description.update(extended=False, partitions=0, replication=0)
        return entity

    def describe_function(self, statement: st.DescribeFunction, text: str) -> dict[str, Any]:
        function = find_function(statement.name)
        if function is None:
            raise KsqlStatementError(f"Can't find any functions with the name '{statement.name}'")
        return {**function.description_json(text), "warnings": []}
