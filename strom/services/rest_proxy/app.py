"""The REST proxy's HTTP API, Confluent's: v2 (produce JSON, binary, Avro, JSON Schema and
Protobuf records to topics and partitions; consumer instances in groups; topic,
partition and broker metadata) and v3 (clusters, brokers, topics, partitions, configs,
consumer groups and their lags, and producing records, one or a stream of them per
request), with their content types and error bodies, on the shared aiohttp stack.

Owns the routes and the records' JSON forms (json: any JSON value, written as its JSON
text; binary: base64; avro, jsonschema and protobuf: Confluent's wire format through
the schema registry given with ``--schema-registry-url``). Produces go through one
shared producer (``producing``), consumer instances live in ``consumers``, Protobuf
messages in ``protobuf_records``, metadata comes from an AdminClient on worker threads
(the client blocks).

Does not own the producer, the consumer instances, or the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import datetime
import functools
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    DescribeClusterResult,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from strom.services.protobuf_schemas import ProtoSchemaError
from strom.services.rest_proxy.consumers import ConsumerInstances, ProxyError
from strom.services.rest_proxy.producing import SharedProducer
from strom.services.rest_proxy.protobuf_records import ProtobufRecords

log = logging.getLogger(__name__)
T = TypeVar("T")
V2 = "application/vnd.kafka.v2+json"
V3 = "application/json"
EMBEDDED = {
    "application/vnd.kafka.json.v2+json": "json",
    "application/vnd.kafka.binary.v2+json": "binary",
    "application/vnd.kafka.avro.v2+json": "avro",
    "application/vnd.kafka.jsonschema.v2+json": "jsonschema",
    "application/vnd.kafka.protobuf.v2+json": "protobuf",
}
REGISTRY_FORMATS = ("avro", "jsonschema", "protobuf")  # records in Confluent's wire format
MAX_BODY = 64 * 1024 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answer(body: Any, status: int = 200, content_type: str = V2) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=content_type)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    v3 = request.path.startswith("/v3")
    try:
        return await handler(request)
    except ProxyError as exc:
        return answer(
            {"error_code": exc.code, "message": exc.message}, exc.status, V3 if v3 else V2
        )
    except web.HTTPRequestEntityTooLarge:
        return answer({"error_code": 413, "message": "Request body too large"}, 413)
    except web.HTTPNotFound:
        return answer({"error_code": 404, "message": "HTTP 404 Not Found"}, 404)
    except web.HTTPMethodNotAllowed:
        return answer({"error_code": 405, "message": "HTTP 405 Method Not Allowed"}, 405)
    except web.HTTPException:
        raise
    except Exception as exc:
        log.exception("REST proxy request %s %s failed", request.method, request.path)
        return answer({"error_code": 50002, "message": f"Kafka error: {exc}"}, 500)


async def _body(request: web.Request) -> Any:
    try:
        return await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError):
        raise ProxyError(400, 400, "Unexpected character in the JSON body") from None


def _kafka(exc: BaseException) -> ProxyError:
    text = str(exc)
    if "UNKNOWN_TOPIC" in text:
        return ProxyError(404, 40401, "Topic not found.")
    return ProxyError(500, 50002, f"Kafka error: {text}")


def _schema_ids(form: str, encoded: list[tuple[bytes | None, bytes | None]]) -> dict[str, Any]:
    """The key and value schema ids of Avro records (from their wire format), as
    Confluent's produce answer carries them; None for other formats."""
    ids: dict[str, Any] = {"key_schema_id": None, "value_schema_id": None}
    if form in REGISTRY_FORMATS:
        for i, name in enumerate(("key_schema_id", "value_schema_id")):
            first = next((pair[i] for pair in encoded if pair[i] is not None), None)
            if first is not None:
                ids[name] = int.from_bytes(first[1:5], "big")
    return ids


class RestProxy:
    def __init__(
        self,
        settings: dict[str, Any],
        schema_registry_url: str | None = None,
        instance_timeout_ms: int = 300_000,
        base_url: str = "",
        registry_client: dict[str, str] | None = None,
    ) -> None:
        """``registry_client``: confluent-kafka SchemaRegistryClient settings beside the
        URL (basic auth, TLS) for a registry that asks for them."""
        self.settings = settings
        self.admin = AdminClient(settings)
        self.producer = SharedProducer(settings)
        self.consumers = ConsumerInstances(settings, instance_timeout_ms)
        self.base_url = base_url
        self.registry_url = schema_registry_url
        self._registry_settings = {**(registry_client or {}), "url": schema_registry_url}
        self._registry: Any = None
        self._protobuf_records: ProtobufRecords | None = None
        self._registry_lock = threading.Lock()
        # (topic, key or value, avro or json, the schema's text) -> its serializer
        self._serializers: dict[tuple[str, str, str, Any], Any] = {}
        app = self.app = web.Application(middlewares=[errors], client_max_size=MAX_BODY)
        r = app.router
        r.add_get("/", self.root)
        r.add_get("/topics", self.v2_topics)
        r.add_get("/topics/{topic}", self.v2_topic)
        r.add_post("/topics/{topic}", self.v2_produce)
        r.add_get("/topics/{topic}/partitions", self.v2_partitions)
        r.add_get("/topics/{topic}/partitions/{partition}", self.v2_partition)
        r.add_post("/topics/{topic}/partitions/{partition}", self.v2_produce)
        r.add_get("/brokers", self.v2_brokers)
        base = "/consumers/{group}/instances/{name}"
        r.add_post("/consumers/{group}", self.v2_create_consumer)
        r.add_delete(base, self.v2_delete_consumer)
        r.add_post(base + "/subscription", self.v2_subscribe)
        r.add_get(base + "/subscription", self.v2_subscription)
        r.add_delete(base + "/subscription", self.v2_unsubscribe)
        r.add_post(base + "/assignments", self.v2_assign)
        r.add_get(base + "/assignments", self.v2_assignments)
        r.add_post(base + "/positions", self.v2_seek)
        r.add_post(base + "/positions/beginning", self.v2_seek_beginning)
        r.add_post(base + "/positions/end", self.v2_seek_end)
        r.add_get(base + "/records", self.v2_records)
        r.add_post(base + "/offsets", self.v2_commit)
        r.add_get(base + "/offsets", self.v2_committed)
        c = "/v3/clusters/{cluster}"
        r.add_get("/v3/clusters", self.v3_clusters)
        r.add_get(c, self.v3_cluster)
        r.add_get(c + "/brokers", self.v3_brokers)
        r.add_get(c + "/topics", self.v3_topics)
        r.add_post(c + "/topics", self.v3_create_topic)
        r.add_get(c + "/topics/{topic}", self.v3_topic)
        r.add_delete(c + "/topics/{topic}", self.v3_delete_topic)
        r.add_get(c + "/topics/{topic}/partitions", self.v3_partitions)
        r.add_get(c + "/topics/{topic}/configs", self.v3_configs)
        r.add_post(c + "/topics/{topic}/records", self.v3_produce)
        r.add_get(c + "/consumer-groups", self.v3_groups)
        r.add_get(c + "/consumer-groups/{group}", self.v3_group)
        r.add_get(c + "/consumer-groups/{group}/lags", self.v3_lags)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        self._expiry: asyncio.Task[None] | None = None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _start(self, _app: web.Application) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_forever())

    async def _stop(self, _app: web.Application) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await self._call(self.consumers.close)
        await self._call(self.producer.close)

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.consumers.timeout_s / 2))
            await self._call(self.consumers.expire)

    # Metadata -----------------------------------------------------------------------------

    def _metadata(self, topic: str | None = None) -> Any:
        try:
            metadata = self.admin.list_topics(timeout=15)
        except Exception as exc:
            raise _kafka(exc) from None
        if topic is not None and (
            topic not in metadata.topics or metadata.topics[topic].error is not None
        ):
            raise ProxyError(404, 40401, "Topic not found.")
        return metadata

    @staticmethod
    def _v2_partition(p: Any) -> dict[str, Any]:
        return {
            "partition": p.id,
            "leader": p.leader,
            "replicas": [
                {"broker": b, "leader": b == p.leader, "in_sync": b in p.isrs} for b in p.replicas
            ],
        }

    async def root(self, request: web.Request) -> web.Response:
        return answer({})

    async def v2_topics(self, request: web.Request) -> web.Response:
        metadata = await self._call(self._metadata)
        return answer(sorted(n for n in metadata.topics if not n.startswith("__")))

    def _configs(self, topic: str) -> dict[str, str | None]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            entries = self.admin.describe_configs([resource])[resource].result()
        except Exception as exc:
            raise _kafka(exc) from None
        return {name: entry.value for name, entry in sorted(entries.items())}

    async def v2_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        metadata = await self._call(self._metadata, name)
        configs = await self._call(self._configs, name)
        partitions = sorted(metadata.topics[name].partitions.values(), key=lambda p: p.id)
        return answer(
            {
                "name": name,
                "configs": configs,
                "partitions": [self._v2_partition(p) for p in partitions],
            }
        )

    async def v2_partitions(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        metadata = await self._call(self._metadata, name)
        partitions = sorted(metadata.topics[name].partitions.values(), key=lambda p: p.id)
        return answer([self._v2_partition(p) for p in partitions])

    async def v2_partition(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        metadata = await self._call(self._metadata, name)
        number = _int(request.match_info["partition"], "partition")
        found = metadata.topics[name].partitions.get(number)
        if found is None:
            raise ProxyError(404, 40402, "Partition not found.")
        return answer(self._v2_partition(found))

    async def v2_brokers(self, request: web.Request) -> web.Response:
        metadata = await self._call(self._metadata)
        return answer({"brokers": sorted(metadata.brokers)})

    # Producing ----------------------------------------------------------------------------

    def _encoder(
        self, form: str, topic: str, body: dict[str, Any], records: list[Any], field: str
    ) -> Any:
        """A function from a record's JSON key or value to its bytes."""
        if form == "json":
            return lambda v: None if v is None else json.dumps(v).encode()
        if form == "binary":

            def decode(v: Any) -> bytes | None:
                if v is None:
                    return None
                try:
                    return base64.b64decode(v, validate=True)
                except (binascii.Error, TypeError, ValueError):
                    raise ProxyError(
                        422, 42205, f"Invalid base64 in the records' {field}s"
                    ) from None

            return decode
        if all(r.get(field) is None for r in records):  # no schema needed for nothing
            return lambda v: None
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from confluent_kafka.serialization import (
            MessageField,
            SerializationContext,
            SerializationError,
        )

        client = self._registry_client()
        schema = body.get(f"{field}_schema")
        schema_id = body.get(f"{field}_schema_id")
        if schema is None and schema_id is None:
            raise ProxyError(
                422, 42205, f"Request includes {field}s but no {field}_schema or {field}_schema_id"
            )  # fmt: skip
        context = SerializationContext(
            topic, MessageField.KEY if field == "key" else MessageField.VALUE
        )
        try:
            if form == "protobuf":
                wanted = None if schema_id is None else int(schema_id)
                serialize = self._protobuf().encoder(f"{topic}-{field}", schema, wanted)[1]
            else:
                if schema is None:
                    assert schema_id is not None  # one of the two is given (checked above)
                    schema = client.get_schema(int(schema_id)).schema_str
                cache_key = (topic, field, form, schema)
                serializer = self._serializers.get(cache_key)
                if serializer is None:
                    serializer = self._serializers[cache_key] = (
                        AvroSerializer(client, schema)
                        if form == "avro"
                        else JSONSerializer(schema, client, conf={"validate": True})
                    )
                serialize = functools.partial(serializer, ctx=context)
        except (SchemaRegistryError, ProtoSchemaError, ValueError) as exc:
            raise ProxyError(422, 42203, f"Invalid {field} schema: {exc}") from None

        def encode(v: Any) -> bytes | None:
            if v is None:
                return None
            try:
                return serialize(v)
            except (SerializationError, ValueError, TypeError) as exc:
                raise ProxyError(
                    422, 42203, f"Conversion of JSON to {form} failed: {exc}"
                ) from None

        return encode

    def _protobuf(self) -> ProtobufRecords:
        """The proxy's Protobuf records, with their cache of message classes."""
        client = self._registry_client()
        with self._registry_lock:
            if self._protobuf_records is None:
                self._protobuf_records = ProtobufRecords(client)
            return self._protobuf_records

    def _registry_client(self) -> Any:
        """The one SchemaRegistryClient (and its cache) of the proxy."""
        if self.registry_url is None:
            raise ProxyError(
                422, 42206, "Avro, JSON Schema and Protobuf records need a schema registry: "
                "start the proxy with --schema-registry-url"
            )  # fmt: skip
        with self._registry_lock:
            if self._registry is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient

                self._registry = SchemaRegistryClient(self._registry_settings)
            return self._registry

    async def v2_produce(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        fixed = request.match_info.get("partition")
        form = EMBEDDED.get(request.content_type)
        if form is None:
            raise ProxyError(
                415, 415, f"HTTP 415 Unsupported Media Type: {request.content_type or 'none'}"
            )
        body = await _body(request)
        records = body.get("records") if isinstance(body, dict) else None
        if not isinstance(records, list) or not records:
            raise ProxyError(422, 42201, "Request includes no records")
        metadata = await self._call(self._metadata, topic)
        partitions = metadata.topics[topic].partitions
        for record in records:
            if not isinstance(record, dict):
                raise ProxyError(422, 42201, "Each record is a JSON object")
            partition = record.get("partition") if fixed is None else _int(fixed, "partition")
            if partition is not None and partition not in partitions:
                raise ProxyError(404, 40402, "Partition not found.")

        def encode_all() -> list[tuple[bytes | None, bytes | None]]:
            encode_key = self._encoder(form, topic, body, records, "key")
            encode_value = self._encoder(form, topic, body, records, "value")
            return [(encode_key(r.get("key")), encode_value(r.get("value"))) for r in records]

        # JSON and binary encode here; the registry's formats ask it, so they run on a thread.
        encoded = await self._call(encode_all) if form in REGISTRY_FORMATS else encode_all()
        loop = asyncio.get_running_loop()
        futures = [
            self.producer.send(
                loop,
                topic,
                key,
                value,
                record.get("partition") if fixed is None else int(fixed),
            )
            for record, (key, value) in zip(records, encoded, strict=True)
        ]
        delivered = await asyncio.gather(*futures)
        offsets = [
            {"partition": d.partition, "offset": d.offset, "error_code": None, "error": None}
            if d.error is None
            else {"partition": None, "offset": None, "error_code": 50002, "error": d.error.str()}
            for d in delivered
        ]
        return answer({**_schema_ids(form, encoded), "offsets": offsets})

    # Consumer instances ---------------------------------------------------------------------

    async def v2_create_consumer(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        body = await _body(request) if request.can_read_body else {}
        instance = await self._call(self.consumers.create, group, body or {})
        base = self.base_url or f"{request.scheme}://{request.host}"
        return answer(
            {
                "instance_id": instance.name,
                "base_uri": f"{base}/consumers/{group}/instances/{instance.name}",
            }
        )

    def _instance(self, request: web.Request) -> Any:
        return self.consumers.get(request.match_info["group"], request.match_info["name"])

    async def v2_delete_consumer(self, request: web.Request) -> web.Response:
        await self._call(
            self.consumers.delete, request.match_info["group"], request.match_info["name"]
        )
        return web.Response(status=204)

    async def v2_subscribe(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        body = await _body(request)
        topics = body.get("topics") if isinstance(body, dict) else None
        pattern = body.get("topic_pattern") if isinstance(body, dict) else None
        if pattern:
            topics = ["^" + str(pattern)]
        if not isinstance(topics, list) or not topics:
            raise ProxyError(422, 42201, "A subscription names topics or a topic_pattern")
        await self._call(self.consumers.subscribe, instance, [str(t) for t in topics])
        return web.Response(status=204)

    async def v2_subscription(self, request: web.Request) -> web.Response:
        return answer({"topics": self._instance(request).subscription})

    async def v2_unsubscribe(self, request: web.Request) -> web.Response:
        await self._call(self.consumers.unsubscribe, self._instance(request))
        return web.Response(status=204)

    @staticmethod
    def _partitions(body: Any) -> list[tuple[str, int]]:
        entries = body.get("partitions") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise ProxyError(422, 42201, "The body names partitions")
        try:
            return [(str(e["topic"]), int(e["partition"])) for e in entries]
        except (KeyError, TypeError, ValueError):
            raise ProxyError(422, 42201, "Each partition has a topic and a partition") from None

    async def v2_assign(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        partitions = self._partitions(await _body(request))
        await self._call(self.consumers.assign, instance, partitions)
        return web.Response(status=204)

    async def v2_assignments(self, request: web.Request) -> web.Response:
        assigned = await self._call(self.consumers.assignment, self._instance(request))
        return answer({"partitions": [{"topic": t, "partition": p} for t, p in assigned]})

    async def v2_seek(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        body = await _body(request)
        try:
            offsets = [
                (str(e["topic"]), int(e["partition"]), int(e["offset"]))
                for e in (body.get("offsets") or [])
            ]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProxyError(
                422, 42201, "Each offset has a topic, a partition and an offset"
            ) from None
        await self._call(self.consumers.seek, instance, offsets)
        return web.Response(status=204)

    async def v2_seek_beginning(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        partitions = self._partitions(await _body(request))
        await self._call(self.consumers.seek_to, instance, partitions, False)
        return web.Response(status=204)

    async def v2_seek_end(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        partitions = self._partitions(await _body(request))
        await self._call(self.consumers.seek_to, instance, partitions, True)
        return web.Response(status=204)

    async def v2_records(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        timeout_ms = _int(request.query.get("timeout", "1000"), "timeout")
        max_bytes = _int(request.query.get("max_bytes", str(64 * 1024 * 1024)), "max_bytes")
        messages = await self._call(self.consumers.records, instance, timeout_ms, max_bytes)
        decode = await self._call(self._decoder, instance.format)
        out = [
            {
                "topic": m.topic(),
                "key": decode(m.key(), m.topic(), "key"),
                "value": decode(m.value(), m.topic(), "value"),
                "partition": m.partition(),
                "offset": m.offset(),
            }
            for m in messages
        ]
        return answer(out, content_type=f"application/vnd.kafka.{instance.format}.v2+json")

    def _decoder(self, form: str) -> Callable[[bytes | None, str, str], Any]:
        if form == "binary":
            return lambda data, _t, _f: None if data is None else base64.b64encode(data).decode()
        if form == "json":

            def from_json(data: bytes | None, _topic: str, field: str) -> Any:
                if data is None:
                    return None
                try:
                    return json.loads(data)
                except ValueError:
                    raise ProxyError(
                        500, 50002, f"Error deserializing the {field} of a record as JSON"
                    ) from None

            return from_json
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        client = self._registry_client()
        if form == "protobuf":
            records = self._protobuf()

            def deserializer(data: bytes, _context: Any) -> Any:
                return records.decode(data)
        else:
            deserializer = (
                AvroDeserializer(client)
                if form == "avro"
                else JSONDeserializer(None, schema_registry_client=client)
            )

        def from_registry(data: bytes | None, topic: str, field: str) -> Any:
            if data is None:
                return None
            kind = MessageField.KEY if field == "key" else MessageField.VALUE
            return deserializer(data, SerializationContext(topic, kind))

        return from_registry

    async def v2_commit(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        body = await _body(request) if request.can_read_body else None
        offsets = None
        if isinstance(body, dict) and body.get("offsets"):
            try:
                offsets = [
                    (str(e["topic"]), int(e["partition"]), int(e["offset"]))
                    for e in body["offsets"]
                ]
            except (KeyError, TypeError, ValueError):
                raise ProxyError(
                    422, 42201, "Each offset has a topic, a partition and an offset"
                ) from None
        await self._call(self.consumers.commit, instance, offsets)
        return web.Response(status=200)

    async def v2_committed(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        partitions = self._partitions(await _body(request))
        found = await self._call(self.consumers.committed, instance, partitions)
        return answer(
            {
                "offsets": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                     "metadata": tp.metadata or ""}
                    for tp in found
                ]
            }
        )  # fmt: skip

    # v3 -----------------------------------------------------------------------------------

    def _cluster_id(self) -> str | None:
        try:
            described: DescribeClusterResult = self.admin.describe_cluster(
                request_timeout=15
            ).result()
            return described.cluster_id
        except Exception as exc:
            raise _kafka(exc) from None

    async def _check_cluster(self, request: web.Request) -> str:
        cluster = await self._call(self._cluster_id)
        wanted = request.match_info["cluster"]
        if wanted != cluster:
            raise ProxyError(404, 404, f"Cluster {wanted} not found")
        return wanted

    def _url(self, request: web.Request, path: str) -> str:
        return f"{self.base_url or f'{request.scheme}://{request.host}'}{path}"

    def _list(self, request: web.Request, kind: str, data: list[Any]) -> web.Response:
        return answer(
            {
                "kind": f"Kafka{kind}List",
                "metadata": {"self": self._url(request, request.path), "next": None},
                "data": data,
            },
            content_type=V3,
        )

    async def v3_clusters(self, request: web.Request) -> web.Response:
        cluster = await self._call(self._cluster_id)
        return self._list(request, "Cluster", [self._cluster_body(request, cluster)])

    def _cluster_body(self, request: web.Request, cluster: str | None) -> dict[str, Any]:
        base = f"/v3/clusters/{cluster}"
        return {
            "kind": "KafkaCluster",
            "metadata": {
                "self": self._url(request, base),
                "resource_name": f"crn:///kafka={cluster}",
            },
            "cluster_id": cluster,
            "brokers": {"related": self._url(request, base + "/brokers")},
            "topics": {"related": self._url(request, base + "/topics")},
            "consumer_groups": {"related": self._url(request, base + "/consumer-groups")},
        }

    async def v3_cluster(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        return answer(self._cluster_body(request, cluster), content_type=V3)

    async def v3_brokers(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        metadata = await self._call(self._metadata)
        data = [
            {
                "kind": "KafkaBroker",
                "metadata": {"self": self._url(request, f"/v3/clusters/{cluster}/brokers/{b.id}")},
                "cluster_id": cluster,
                "broker_id": b.id,
                "host": b.host,
                "port": b.port,
                "rack": None,
            }
            for b in sorted(metadata.brokers.values(), key=lambda b: b.id)
        ]
        return self._list(request, "Broker", data)

    def _topic_body(
        self, request: web.Request, cluster: str, name: str, topic: Any
    ) -> dict[str, Any]:
        base = f"/v3/clusters/{cluster}/topics/{name}"
        partitions = topic.partitions.values()
        return {
            "kind": "KafkaTopic",
            "metadata": {"self": self._url(request, base)},
            "cluster_id": cluster,
            "topic_name": name,
            "is_internal": name.startswith("__"),
            "replication_factor": max((len(p.replicas) for p in partitions), default=0),
            "partitions_count": len(topic.partitions),
            "partitions": {"related": self._url(request, base + "/partitions")},
            "configs": {"related": self._url(request, base + "/configs")},
        }

    async def v3_topics(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        metadata = await self._call(self._metadata)
        data = [
            self._topic_body(request, cluster, name, topic)
            for name, topic in sorted(metadata.topics.items())
        ]
        return self._list(request, "Topic", data)

    async def v3_topic(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        name = request.match_info["topic"]
        metadata = await self._call(self._metadata, name)
        return answer(
            self._topic_body(request, cluster, name, metadata.topics[name]), content_type=V3
        )

    async def v3_create_topic(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        body = await _body(request)
        if not isinstance(body, dict) or not body.get("topic_name"):
            raise ProxyError(400, 400, "The body names the topic: topic_name")
        name = str(body["topic_name"])
        configs = {str(c["name"]): str(c["value"]) for c in body.get("configs") or []}
        topic = NewTopic(
            name,
            int(body.get("partitions_count", -1)),
            int(body.get("replication_factor", -1)),
            config=configs,
        )

        def create() -> None:
            try:
                self.admin.create_topics([topic], request_timeout=30)[name].result()
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    raise ProxyError(400, 40002, f"Topic '{name}' already exists.") from None
                raise ProxyError(400, 400, str(exc)) from None

        await self._call(create)
        metadata = await self._call(self._metadata, name)
        return answer(self._topic_body(request, cluster, name, metadata.topics[name]), 201, V3)

    async def v3_delete_topic(self, request: web.Request) -> web.Response:
        await self._check_cluster(request)
        name = request.match_info["topic"]
        await self._call(self._metadata, name)

        def delete() -> None:
            try:
                self.admin.delete_topics([name], request_timeout=30)[name].result()
            except Exception as exc:
                raise _kafka(exc) from None

        await self._call(delete)
        return web.Response(status=204)

    async def v3_partitions(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        name = request.match_info["topic"]
        metadata = await self._call(self._metadata, name)
        base = f"/v3/clusters/{cluster}/topics/{name}/partitions"
        data = [
            {
                "kind": "KafkaPartition",
                "metadata": {"self": self._url(request, f"{base}/{p.id}")},
                "cluster_id": cluster,
                "topic_name": name,
                "partition_id": p.id,
                "leader": {
                    "related": self._url(request, f"/v3/clusters/{cluster}/brokers/{p.leader}")
                },
            }
            for p in sorted(metadata.topics[name].partitions.values(), key=lambda p: p.id)
        ]
        return self._list(request, "Partition", data)

    async def v3_configs(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        name = request.match_info["topic"]
        await self._call(self._metadata, name)
        configs = await self._call(self._configs, name)
        base = f"/v3/clusters/{cluster}/topics/{name}/configs"
        data = [
            {
                "kind": "KafkaTopicConfig",
                "metadata": {"self": self._url(request, f"{base}/{key}")},
                "cluster_id": cluster,
                "topic_name": name,
                "name": key,
                "value": value,
            }
            for key, value in configs.items()
        ]
        return self._list(request, "TopicConfig", data)

    def _groups(self) -> list[Any]:
        try:
            return sorted(
                self.admin.list_consumer_groups(request_timeout=15).result().valid,
                key=lambda g: g.group_id,
            )
        except Exception as exc:
            raise _kafka(exc) from None

    def _group_body(self, request: web.Request, cluster: str, group: Any) -> dict[str, Any]:
        base = f"/v3/clusters/{cluster}/consumer-groups/{group.group_id}"
        return {
            "kind": "KafkaConsumerGroup",
            "metadata": {"self": self._url(request, base)},
            "cluster_id": cluster,
            "consumer_group_id": group.group_id,
            "is_simple": bool(getattr(group, "is_simple_consumer_group", False)),
            "state": getattr(group.state, "name", str(group.state)),
            "lags": {"related": self._url(request, base + "/lags")},
        }

    async def v3_groups(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        groups = await self._call(self._groups)
        return self._list(
            request, "ConsumerGroup", [self._group_body(request, cluster, g) for g in groups]
        )

    async def v3_group(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        wanted = request.match_info["group"]
        groups = [g for g in await self._call(self._groups) if g.group_id == wanted]
        if not groups:
            raise ProxyError(404, 404, f"Consumer group {wanted} not found")
        return answer(self._group_body(request, cluster, groups[0]), content_type=V3)

    def _lags(self, group: str) -> list[tuple[str, int, int, int]]:
        try:
            result = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
                group
            ].result()
        except Exception as exc:
            raise _kafka(exc) from None
        committed = [tp for tp in result.topic_partitions if tp.error is None and tp.offset >= 0]
        if not committed:
            return []
        ends = self.admin.list_offsets(
            {TopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in committed}
        )
        out = []
        for tp in committed:
            end = ends[TopicPartition(tp.topic, tp.partition)].result().offset
            out.append((tp.topic, tp.partition, tp.offset, end))
        return sorted(out)

    async def v3_lags(self, request: web.Request) -> web.Response:
        cluster = await self._check_cluster(request)
        group = request.match_info["group"]
        lags = await self._call(self._lags, group)
        base = f"/v3/clusters/{cluster}/consumer-groups/{group}/lags"
        data = [
            {
                "kind": "KafkaConsumerLag",
                "metadata": {"self": self._url(request, f"{base}/{t}/partitions/{p}")},
                "cluster_id": cluster,
                "consumer_group_id": group,
                "topic_name": t,
                "partition_id": p,
                "current_offset": committed,
                "log_end_offset": end,
                "lag": max(0, end - committed),
            }
            for t, p, committed, end in lags
        ]
        return self._list(request, "ConsumerLag", data)

    async def v3_produce(self, request: web.Request) -> web.StreamResponse:
        """One record per JSON object in the body. A body sent whole with one object gets
        that record's answer; several objects, or a chunked body (a stream), get one
        result per line, in order, each written once its record is acknowledged, while
        the rest of the body is still arriving."""
        cluster = await self._check_cluster(request)
        topic = request.match_info["topic"]
        metadata = await self._call(self._metadata, topic)
        partitions = metadata.topics[topic].partitions
        if not request.headers.get("Transfer-Encoding", "").lower().endswith("chunked"):
            raw = (await request.read()).decode("utf-8", "replace")
            objects, rest = _json_objects(raw)
            if rest.strip():
                raise ProxyError(400, 400, "Unexpected character in the JSON body")
            if not objects:
                raise ProxyError(400, 400, "The body holds no record")
            if len(objects) == 1:
                result = await self._v3_outcome(self._v3_send(objects[0], topic, partitions),
                                                cluster, topic)  # fmt: skip
                code = result["error_code"]
                return answer(result, code if code < 600 else code // 100, V3)
        else:
            objects = None
        response = web.StreamResponse(status=200, headers={"Content-Type": V3})
        await response.prepare(request)
        pending: asyncio.Queue[Any] = asyncio.Queue()

        async def write_results() -> None:
            while (entry := await pending.get()) is not None:
                result = await self._v3_outcome(entry, cluster, topic)
                await response.write((json.dumps(result) + "\n").encode())

        writer = asyncio.get_running_loop().create_task(write_results())
        try:
            if objects is not None:
                for record in objects:
                    pending.put_nowait(self._v3_send(record, topic, partitions))
            else:
                await self._v3_stream(request, topic, partitions, pending)
        finally:
            pending.put_nowait(None)
            await writer
        await response.write_eof()
        return response

    async def _v3_stream(
        self, request: web.Request, topic: str, partitions: Any, pending: asyncio.Queue[Any]
    ) -> None:
        """Send each record of a chunked body as soon as its JSON object is complete."""
        text = codecs.getincrementaldecoder("utf-8")("replace")
        buffered = ""
        while True:
            chunk = await request.content.readany()
            buffered += text.decode(chunk, final=not chunk)
            objects, buffered = _json_objects(buffered)
            for record in objects:
                pending.put_nowait(self._v3_send(record, topic, partitions))
            if not chunk:
                break
        if buffered.strip():
            pending.put_nowait(ProxyError(400, 400, "Unexpected character in the JSON body"))

    def _v3_send(self, record: Any, topic: str, partitions: Any) -> Any:
        """The record handed to the shared producer, as (future, key, value), or the
        ProxyError that refuses it."""
        try:
            key = _v3_data(record.get("key"), "key")
            value = _v3_data(record.get("value"), "value")
            partition = record.get("partition_id")
            if partition is not None and partition not in partitions:
                return ProxyError(404, 40402, "Partition not found.")
            headers = [
                (str(h["name"]), base64.b64decode(h["value"]) if h.get("value") else b"")
                for h in record.get("headers") or []
            ]
        except ProxyError as exc:
            return exc
        except (AttributeError, KeyError, TypeError, ValueError, binascii.Error):
            return ProxyError(400, 400, "Malformed record")
        loop = asyncio.get_running_loop()
        future = self.producer.send(loop, topic, key[0], value[0], partition, headers)
        return future, key, value

    async def _v3_outcome(self, entry: Any, cluster: str, topic: str) -> dict[str, Any]:
        if isinstance(entry, ProxyError):
            return {"error_code": entry.code, "message": entry.message}
        future, key, value = entry
        delivered = await future
        if delivered.error is not None:
            return {"error_code": 500, "message": delivered.error.str()}
        body: dict[str, Any] = {
            "error_code": 200,
            "cluster_id": cluster,
            "topic_name": topic,
            "partition_id": delivered.partition,
            "offset": delivered.offset,
            "timestamp": _iso(delivered.timestamp_ms),
        }
        for field, (data, kind) in (("key", key), ("value", value)):
            body[field] = None if data is None else {"type": kind, "size": len(data)}
        return body


def _json_objects(text: str) -> tuple[list[Any], str]:
    """The complete JSON values at the start of ``text``, one after another, and what is
    left (an incomplete value, or something that is not JSON)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return values, ""
        try:
            value, position = decoder.raw_decode(text, position)
        except ValueError:
            return values, text[position:]
        values.append(value)


def _v3_data(data: Any, field: str) -> tuple[bytes | None, str]:
    """A v3 record's key or value: {"type": "JSON"|"BINARY"|"STRING", "data": ...}."""
    if data is None:
        return None, "JSON"
    kind = str(data.get("type", "JSON")).upper()
    payload = data.get("data")
    if kind == "BINARY":
        return (None if payload is None else base64.b64decode(payload, validate=True)), kind
    if kind == "STRING":
        return (None if payload is None else str(payload).encode()), kind
    if kind == "JSON":
        return (None if payload is None else json.dumps(payload).encode()), kind
    raise ProxyError(400, 400, f"Unsupported {field} type {kind}: JSON, BINARY or STRING")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProxyError(400, 400, f"Invalid {what}: {text!r} is not a whole number") from None


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
