"""ksqlDB conformance: ksqlDB's own query-validation test cases (QTT) run against Strom.

Measures how many of ksqlDB's functional test cases Strom's ksql server passes record
for record, and how many of the errors they expect it gives in ksqlDB's words. The
case files (``query-validation-tests/*.json`` of ksqlDB's repository) are read at run
time from the path given: a directory of ``.json`` files, or a bare git directory of
ksqlDB's repository (then read at its HEAD, ``--tree`` the path inside it).

Starts one real broker (``strom broker``) and one ksql server (``strom ksql-server``,
Spark ``local[2]``, C1 JIT, trigger interval 200 ms), then runs ``--jobs`` cases at a
time, each in its own names: every stream, table and topic the case creates gets a
suffix (``__C<n>C``; a source named after FROM or JOIN keeps its old name as its alias,
so that columns are qualified as ksqlDB qualifies them), and the suffix is taken out of
error messages and topic names before comparing. For each case: its input topics
created (one partition, or the partitions the case gives), its statements run one by
one over ``/ksql`` (``auto.offset.reset`` earliest, the case's properties), its inputs
produced with their keys, values and timestamps in the formats of the sources that read
them (one at a time where the file's order matters, below), then the records
expected on each sink topic waited for (bounded: a case that
expects none is given a short wait) and compared in order: key, value, timestamp (when
the case gives one) and window bounds (windowed keys). A case that expects an error
passes when a statement fails with a message containing the expected one; one that
expects its query to fail at a record (a StreamsException: ksqlDB's test driver stops
there) when the statements succeed, the records before that one made what it expects
(repeats of them after them allowed: a query in ERROR is retried; a first part of them
when a record fails to serialize, itself one the case lists) and a query of the case
has the expected message and cause message in its queryErrors. Its queries
are terminated at its end.

ksqlDB's test driver feeds a case's inputs one by one in the file's order, each
processed fully before the next. Written at once, inputs on several topics are taken
by the timestamp rule instead (Strom's, as Kafka Streams' on a broker): of the topics
with records waiting, the one whose next record has the smallest time (its source's
TIMESTAMP column, else the record's timestamp). A case whose inputs that rule would
take in another order than the file's (``in_file_order_only``) has them written one
at a time: each record, then a wait until every query of the case has read all of its
sources' records, by the consumer offsets the server gives in ``DESCRIBE <sink>
EXTENDED`` (``queryOffsetSummaries``: a query's offsets move once a micro-batch's
output is written). The other cases' inputs are written at once.

The schema registry's formats (AVRO, PROTOBUF, JSON_SR) go through a schema registry
started beside the broker, PROTOBUF_NOSR as the message of the source's columns
(``ksql_conformance_formats``).

Not runnable, counted apart with their reason: disabled cases, cases of ksqlDB's
test-only UDFs, cases with input headers or windowed input keys of session windows.

Usage: python bench/ksql_conformance.py PATH [--tree DIR] [--files GLOB] [--case TEXT]
[--jobs N] [--out DIR] [--rerun | --resume RESULTS] [--summary RESULTS...]. Prints a
line per case, then per family (file) and overall: cases matched / runnable, errors
matched / expected, and the not runnable by reason.
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import math
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from ksql_conformance_formats import (  # noqa: E402
    NOSR,
    REGISTRY_FORMATS,
    RegistryCodec,
    decode_nosr,
    encode_nosr,
    nullable_setting,
    sink_fields,
    start_registry,
    type_text,
    with_schema_ids,
)
from service_process import ServiceProcess  # noqa: E402

from strom.ksql.rest_client import KsqlRestClient, KsqlServerError  # noqa: E402
from strom.zero_time import ZeroTimeRecord, ZeroTimeWriter  # noqa: E402

TREE = "ksqldb-functional-tests/src/test/resources/query-validation-tests"
FORMATS = {"JSON", "KAFKA", "DELIMITED", "NONE"}
OTHER_FORMATS: tuple[str, ...] = ()
# ksqlDB's functional tests' own UDFs (ksqldb-functional-tests' test-only functions)
TEST_UDFS = (
    "TEST_UDF", "TEST_UDAF", "TEST_UDTF", "BAD_TEST_UDF", "BAD_TEST_UDAF", "BAD_TEST_UDTF",
    "BAD_UDF", "THROWING_UDTF", "WHENCONDITION", "WHENRESULT", "VAR_ARG", "MID_VAR_ARG",
    "GENERIC_VAR_ARG", "MULTI_ARG", "FOUR_ARG", "FIVE_ARG", "OBJ_COL_ARG", "RETURNDECIMAL",
    "DECIMALSTRUCT", "KSQLSTRUCTUDF", "COMPLEXFUNCTION", "CONFIGURABLEUDF", "TOSTRUCT",
)  # fmt: skip
OUTPUT_WAIT_S = 240.0  # the bound on a case's expected records
QUERY_ERROR_WAIT_S = 60.0  # the bound on a failing query's error
NO_OUTPUT_WAIT_S = 25.0  # a case that expects no record on a topic
EXTRA_WAIT_S = 2.0  # records beyond the expected ones, looked for after them
SETTLE_WAIT_S = 120.0  # the bound on the queries' reading of one input fed alone
SETTLE_POLL_S = 0.1  # how often the server is asked whether they read it
SUFFIX_RE = re.compile(r"__C\d+C", re.IGNORECASE)
# where in the statements an error is: the cases' statements are run one by one here,
# under longer names, so the line and column are not ksqlDB's; compared without them
PLACE_RE = re.compile(
    r"Failed to prepare statement: |\b[Ll]ine \d+:\d+: ?|Line: \d+, Col: \d+: ?"
    r"| at line \d+:\d+"
)


# ---------------------------------------------------------------- case files


def load_families(path: Path, tree: str, pattern: str) -> dict[str, list[dict[str, Any]]]:
    """The case files' tests by family (file name without .json)."""
    texts: dict[str, str] = {}
    if (path / "HEAD").exists() and (path / "objects").is_dir():  # a bare git dir
        names = subprocess.run(
            ["git", "-C", str(path), "ls-tree", "-r", "--name-only", "HEAD", tree + "/"],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        for name in names:
            if name.endswith(".json") and fnmatch.fnmatch(Path(name).name, pattern):
                texts[Path(name).stem] = subprocess.run(
                    ["git", "-C", str(path), "show", f"HEAD:{name}"],
                    check=True, capture_output=True, text=True,
                ).stdout  # fmt: skip
    else:
        for file in sorted(path.glob("*.json")):
            if fnmatch.fnmatch(file.name, pattern):
                texts[file.stem] = file.read_text()
    families = {}
    for family, text in sorted(texts.items()):
        # a few files hold // comment lines, which JSON has not
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
        families[family] = json.loads("\n".join(lines)).get("tests", [])
    return families


def expand(test: dict[str, Any]) -> list[dict[str, Any]]:
    """A test with a ``format`` list as one case per format ({FORMAT} filled in)."""
    formats = test.get("format")
    if not formats:
        return [test]
    cases = []
    for fmt in formats:
        text = json.dumps(test).replace("{FORMAT}", fmt)
        case = json.loads(text)
        case["name"] = f"{test['name']} - {fmt}"
        cases.append(case)
    return cases


def not_runnable(case: dict[str, Any]) -> str | None:
    """Why the harness cannot run the case, or None."""
    if case.get("enabled") is False:
        return "disabled"
    text = json.dumps(case.get("statements", [])).upper()
    for fmt in OTHER_FORMATS:
        if re.search(rf"['\"]{fmt}['\"]|\\\"{fmt}\\\"", text) or f"'{fmt}'" in text:
            return f"format {fmt}"
    props = json.dumps(case.get("properties", {})).upper()
    if any(f'"{fmt}"' in props for fmt in OTHER_FORMATS):
        return "format (default) " + next(f for f in OTHER_FORMATS if f'"{f}"' in props)
    for topic in case.get("topics", []):
        for part in ("keyFormat", "valueFormat", "format"):
            if str(topic.get(part, "")).upper() in OTHER_FORMATS:
                return f"format {topic[part]}"
        if "schema" in topic:
            return "topic with a registered schema"
    if any(re.search(rf"\b{udf}\s*\(", text) for udf in TEST_UDFS):
        return "test-only UDF"
    if any("headers" in record for record in case.get("inputs", [])):
        return "input headers"
    if any(r.get("window", {}).get("type") == "session" for r in case.get("inputs", [])):
        return "session-windowed input keys"
    if "expectedException" not in case and not case.get("outputs") and not case.get("inputs"):
        return "no inputs or outputs (checks only the plan)"
    return None


# ---------------------------------------------------------------- renaming

TOKEN_RE = re.compile(
    r"(?P<space>\s+|--[^\n]*)|(?P<string>'(?:[^']|'')*')|(?P<quoted>`[^`]*`|\"[^\"]*\")"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_@$]*)|(?P<other>.)",
    re.DOTALL,
)
NOT_ALIAS = {
    "WHERE", "WINDOW", "GROUP", "PARTITION", "EMIT", "LIMIT", "HAVING", "LEFT", "RIGHT",
    "FULL", "INNER", "OUTER", "JOIN", "WITHIN", "ON", "WITH", "SELECT", "AS",
}  # fmt: skip
NAME_BEFORE = {"STREAM", "TABLE", "EXISTS", "FROM", "JOIN", "INTO", "DESCRIBE", "EXTENDED"}


def tokens(text: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "other", m.group()) for m in TOKEN_RE.finditer(text)]


def name_of(kind: str, text: str) -> str:
    """An identifier as ksqlDB stores it: unquoted ones upper case."""
    return text[1:-1] if kind == "quoted" else text.upper()


def created_names(statements: list[str]) -> set[str]:
    names = set()
    for statement in statements:
        words = [(k, t) for k, t in tokens(statement) if k != "space"]
        upper = [t.upper() for _, t in words]
        if not upper or upper[0] != "CREATE":
            continue
        for i, word in enumerate(upper):
            if word in ("STREAM", "TABLE") and i + 1 < len(words):
                j = i + 1
                if upper[j : j + 3] == ["IF", "NOT", "EXISTS"]:
                    j += 3
                if j < len(words) and words[j][0] in ("word", "quoted"):
                    names.add(name_of(*words[j]))
                break
    return names


def created_types(statements: list[str]) -> list[str]:
    """The custom types the statements create (CREATE TYPE name AS ...), as written."""
    found = []
    for statement in statements:
        words = [t for k, t in tokens(statement) if k != "space"]
        upper = [w.upper() for w in words]
        if upper[:3] == ["CREATE", "TYPE", "IF"] and len(words) > 5:
            found.append(words[5])  # CREATE TYPE IF NOT EXISTS name
        elif upper[:2] == ["CREATE", "TYPE"] and len(words) > 2:
            found.append(words[2])
    return found


def query_sinks(statements: list[str]) -> set[str]:
    """The names (upper case) of the streams and tables the statements create AS SELECT."""
    sinks = set()
    for statement in statements:
        upper = [t.upper() for k, t in tokens(statement) if k != "space"]
        if upper[:1] == ["CREATE"] and "AS" in upper and "SELECT" in upper:
            sinks |= {n.upper() for n in created_names([statement])}
    return sinks


def created_topics(renamed: list[str], topics: dict[str, int], inferred: int) -> set[str]:
    """The topics the (renamed) CREATE statements, not AS SELECT, name in KAFKA_TOPIC:
    one ``topics`` lists keeps its count, and its statement loses PARTITIONS and REPLICAS
    (QTT makes a listed topic with its partitions and runs no topic creation for a
    CREATE: they are not checked against it, a server checks them); one the statement
    makes with its PARTITIONS is given back; any other is added to ``topics`` with
    ``inferred`` partitions."""
    made: set[str] = set()
    listed = set(topics)
    for index, statement in enumerate(renamed):
        words = [(k, t) for k, t in tokens(statement) if k != "space"]
        upper = [t.upper() for _, t in words]
        if upper[:1] != ["CREATE"] or "AS" in upper and "SELECT" in upper:
            continue
        for i, word in enumerate(upper[:-2]):
            if word == "KAFKA_TOPIC" and words[i + 2][0] == "string":
                name = words[i + 2][1][1:-1].replace("''", "'")
                if name in listed:
                    renamed[index] = without_topic_counts(statement)
                elif "PARTITIONS" in upper:
                    made.add(name)
                else:
                    topics.setdefault(name, inferred)
    return made


def record_time(record: dict[str, Any], source: Source | None) -> int:
    """The time a processor orders a record by: its source's TIMESTAMP column's value
    when the source has one and the value is a number, else the record's timestamp."""
    if source is not None and source.timestamp:
        value = record.get("value")
        if isinstance(value, dict):
            found = {k.upper(): v for k, v in value.items()}.get(source.timestamp.upper())
            if isinstance(found, int) and not isinstance(found, bool):
                return found
    return int(record.get("timestamp", 0) or 0)


def in_file_order_only(
    inputs: list[dict[str, Any]], suffix: str, sources: dict[str, Source]
) -> bool:
    """Whether the inputs must be fed one at a time to be processed in the file's order,
    as ksqlDB's test driver feeds them. Written at once to several topics, they are
    taken (by Strom, as by Kafka Streams on a broker) by the timestamp rule: of the
    topics with records waiting, the one whose next record has the smallest time
    (``record_time``; ties in the file's order). True when the inputs are on several
    topics and that rule takes them in another order than the file's."""
    queues: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for index, record in enumerate(inputs):
        topic = record["topic"] + suffix
        queues[topic].append((record_time(record, sources.get(topic)), index))
    if len(queues) < 2:
        return False
    heads = dict.fromkeys(queues, 0)
    taken: list[int] = []
    while len(taken) < len(inputs):
        waiting = [queues[t][i] for t, i in heads.items() if i < len(queues[t])]
        _, index = min(waiting)
        taken.append(index)
        heads[inputs[index]["topic"] + suffix] += 1
    return taken != sorted(taken)


def without_topic_counts(statement: str) -> str:
    """The CREATE statement without its WITH clause's PARTITIONS and REPLICAS settings
    (it keeps its KAFKA_TOPIC)."""
    setting = r"\b(?:PARTITIONS|REPLICAS)\s*=\s*\d+"
    statement = re.sub(r"\s*,\s*" + setting, "", statement, flags=re.IGNORECASE)
    return re.sub(setting + r"\s*,\s*", "", statement, flags=re.IGNORECASE)


def rename(statement: str, names: set[str], suffix: str) -> str:
    """The statement with the case's sources and topics under their suffixed names."""
    parts = tokens(statement)
    out: list[str] = []
    significant = [i for i, (k, _) in enumerate(parts) if k != "space"]
    previous: dict[int, str] = {}
    following: dict[int, tuple[str, str]] = {}
    for a, b in itertools.pairwise(significant):
        previous[b] = parts[a][1].upper()
        following[a] = parts[b]
    topic_next = False
    for i, (kind, text) in enumerate(parts):
        if kind == "string" and topic_next:
            out.append(text[:-1] + suffix + "'")
            topic_next = False
            continue
        if kind == "word" and text.upper() == "KAFKA_TOPIC":
            topic_next = True
        elif kind not in ("space",) and not (kind == "other" and text == "="):
            topic_next = False
        if kind in ("word", "quoted") and previous.get(i) in NAME_BEFORE:
            name = name_of(kind, text)
            # a name differing from a created one only in case too: ksqlDB's hint then
            # finds the created one under the same suffix
            if name.upper() in {n.upper() for n in names}:
                renamed = f"`{name}{suffix}`"
                out.append(renamed)
                if previous.get(i) in ("FROM", "JOIN"):
                    nxt = following.get(i, ("other", ";"))
                    alias = nxt[0] == "quoted" or (
                        nxt[0] == "word" and nxt[1].upper() not in NOT_ALIAS
                    )
                    if not alias and nxt[1].upper() != "AS":
                        out.append(f" `{name}`")
                continue
        out.append(text)
    return "".join(out)


def unsuffixed(value: Any) -> Any:
    return SUFFIX_RE.sub("", value) if isinstance(value, str) else value


# ---------------------------------------------------------------- serdes

KAFKA_PACK = {"INTEGER": ">i", "INT": ">i", "BIGINT": ">q", "DOUBLE": ">d"}


@dataclass
class Source:
    name: str
    topic: str
    key_format: str
    value_format: str
    window: str | None
    keys: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    values: list[tuple[str, str]] = field(default_factory=list)
    # *_PROTOBUF_NULLABLE_REPRESENTATION of the statement creating it (PROTOBUF_NOSR)
    nullable: dict[str, str | None] = field(default_factory=dict)
    timestamp: str = ""  # the column giving its records' times (TIMESTAMP=), if any


def encode_kafka(value: Any, type_: str) -> bytes | None:
    if value is None:
        return None
    base = type_.split("(")[0].upper()
    if base in KAFKA_PACK:
        pack = KAFKA_PACK[base]
        return struct.pack(pack, float(value) if pack == ">d" else int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value).encode()
    return str(value).encode()


def encode(value: Any, fmt: str, columns: list[tuple[str, str]]) -> bytes | None:
    if value is None:
        return None
    if fmt == "KAFKA":
        return encode_kafka(value, columns[0][1] if columns else "STRING")
    if fmt == "DELIMITED" and isinstance(value, str):
        return value.encode()
    if fmt == "DELIMITED":
        return ",".join("" if v is None else str(v) for v in _as_list(value)).encode()
    if fmt in ("JSON", "NONE") or isinstance(value, (dict, list)):
        return json.dumps(value).encode()
    return json.dumps(value).encode()


def _as_list(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else [value]


def decode(data: bytes | None, fmt: str, columns: list[tuple[str, str]]) -> Any:
    if data is None:
        return None
    if fmt == "KAFKA" and columns:
        base = columns[0][1].split("(")[0].upper()
        if base in KAFKA_PACK and len(data) == struct.calcsize(KAFKA_PACK[base]):
            return struct.unpack(KAFKA_PACK[base], data)[0]
        return data.decode(errors="replace")
    if fmt == "DELIMITED":
        return data.decode(errors="replace")
    if fmt == "KAFKA":
        return data.decode(errors="replace")
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


def window_key(key: bytes | None, window: dict[str, Any] | None) -> bytes | None:
    if key is None or not window:
        return key
    if window.get("type") == "session":
        return key + struct.pack(">qq", int(window["end"]), int(window["start"]))
    return key + struct.pack(">q", int(window["start"]))


def as_written(record: dict[str, Any], source: Source | None) -> dict[str, Any]:
    """An expected JSON record's value as the sink's schema reads it, as ksqlDB's test
    driver reads it: its value columns (by name, case aside), a column it lacks null,
    fields the schema has not dropped."""
    value = record.get("value")
    if source is None or not isinstance(value, dict):
        return record
    if source.value_format not in ("JSON", NOSR, *REGISTRY_FORMATS):
        return record
    if not source.values:
        return record
    by_name = {k.upper(): v for k, v in value.items()}
    if len(source.values) == 1 and source.values[0][0].upper() not in by_name:
        return record  # an unwrapped single value, or a shape to show as it is
    return {
        **record,
        "value": {
            name: as_decimal(by_name.get(name.upper()), sql_type)
            for name, sql_type in source.values
        },
    }


def as_decimal(value: Any, sql_type: str) -> Any:
    """A DECIMAL's expected value given as text ("3.40"), as the number ksqlDB's test
    driver reads it into: a column's, or one inside its ARRAY, MAP or STRUCT (the
    driver compares text with a decimal by its value)."""
    text = sql_type.strip()
    upper = text.upper()
    if isinstance(value, str) and upper.startswith("DECIMAL"):
        try:
            return float(value)
        except ValueError:
            return value
    if upper.startswith("ARRAY<") and isinstance(value, list):
        return [as_decimal(item, text[6:-1]) for item in value]
    if upper.startswith("MAP<") and isinstance(value, dict):
        parts = _type_parts(text[4:-1])
        inner = parts[1] if len(parts) == 2 else ""
        return {k: as_decimal(v, inner) for k, v in value.items()}
    if upper.startswith("STRUCT<") and isinstance(value, dict):
        fields: dict[str, str] = {}
        for part in _type_parts(text[7:-1]):
            found = re.match(r"\s*(`[^`]*`|\S+)\s+(.*)", part, re.S)
            if found:
                fields[found.group(1).strip("`").upper()] = found.group(2)
        return {k: as_decimal(v, fields.get(k.upper(), "")) for k, v in value.items()}
    return value


def _type_parts(text: str) -> list[str]:
    """A type list's parts ("STRING, DECIMAL(2, 1)"): split at its top-level commas."""
    parts: list[str] = []
    depth = 0
    current = ""
    quoted = False
    for char in text:
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "<(":
            depth += 1
        elif not quoted and char in ">)":
            depth -= 1
        elif not quoted and char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def same(expected: Any, actual: Any) -> bool:
    """JSON values equal, numbers by value (1 == 1.0, decimals as ksqlDB writes them)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual or expected == actual and type(expected) is type(actual)
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, float) and math.isnan(expected):
            return isinstance(actual, float) and math.isnan(actual)
        return expected == actual or math.isclose(expected, actual, rel_tol=1e-12)
    if isinstance(expected, dict) and isinstance(actual, dict):
        # as ksqlDB's test driver compares a struct: as many fields, each expected one
        # read by its name, else by its name in upper case (a field missing: null)
        return len(expected) == len(actual) and all(
            same(v, actual[k] if actual.get(k) is not None else actual.get(k.upper()))
            for k, v in expected.items()
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            same(a, b) for a, b in zip(expected, actual, strict=True)
        )
    return bool(expected == actual)


# ---------------------------------------------------------------- the harness


@dataclass
class Result:
    family: str
    name: str
    kind: str  # "output", "error" or "skip"
    ok: bool = False
    reason: str = ""
    diff: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Harness:
    def __init__(self, work: Path, jobs: int, wait_s: float = OUTPUT_WAIT_S) -> None:
        self.wait_s = wait_s
        self.broker = BrokerProcess(work / "broker")
        (work / "broker").mkdir()
        self.broker.start()
        self.registry = start_registry(self.broker.bootstrap)
        self.codec = RegistryCodec(self.registry.url)
        overrides = {
            "ksql.schema.registry.url": self.registry.url,
            "bootstrap.servers": self.broker.bootstrap,
            "listeners": "http://127.0.0.1:0",
            "ksql.service.id": "conformance_",
            "ksql.streams.state.dir": str(work / "ksql-state"),
            "ksql.spark.master": "local[2]",
            "ksql.spark.trigger.interval.ms": "200",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
            "spark.sql.shuffle.partitions": "1",
            "ksql.streams.session.timeout.ms": "60000",
            "ksql.query.retry.backoff.initial.ms": "1000",
            "ksql.query.retry.backoff.max.ms": "5000",
        }
        args = [arg for k, v in overrides.items() for arg in ("--override", f"{k}={v}")]
        self.server = ServiceProcess(["ksql-server", *args, "--log-level", "WARNING"])
        self.client = KsqlRestClient(self.server.url)
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, "log_level": 0})
        self.zero = ZeroTimeWriter({"bootstrap.servers": self.broker.bootstrap})
        self.counter = itertools.count(1)
        self.lock = threading.Lock()
        self.jobs = jobs
        self.stopping = False  # Ctrl-C: the cases not yet run are not run

    def stop(self) -> None:
        self.zero.close()
        self.server.stop()
        self.registry.stop()
        self.broker.stop()

    # -- server calls

    def ksql(self, statement: str, properties: dict[str, Any]) -> tuple[bool, Any]:
        try:
            return True, self.client.ksql(statement, properties)
        except KsqlServerError as exc:
            return False, exc.body

    def sources(self, names: set[str], suffix: str) -> dict[str, Source]:
        """The case's streams and tables by topic."""
        found: dict[str, Source] = {}
        for name in sorted(names):
            ok, answer = self.ksql(f"DESCRIBE `{name}{suffix}`;", {})
            if not ok or not answer:
                continue
            desc = answer[0].get("sourceDescription", {})
            keys, values = [], []
            for f in desc.get("fields", []):
                column = (f["name"], type_text(f.get("schema") or {}))
                (keys if f.get("type") == "KEY" else values).append(column)
            found[desc["topic"]] = Source(
                desc["name"], desc["topic"], str(desc.get("keyFormat", "KAFKA")),
                str(desc.get("valueFormat", "JSON")), desc.get("windowType"), keys, values,
                timestamp=str(desc.get("timestamp") or ""),
            )  # fmt: skip
        return found

    def terminate(self, suffix: str) -> None:
        ok, answer = self.ksql("SHOW QUERIES;", {})
        if not ok:
            return
        for entity in answer:
            for query in entity.get("queries", []):
                if suffix.upper() in str(query.get("id", "")).upper():
                    self.ksql(f"TERMINATE {query['id']};", {})

    # -- a case

    def run(self, family: str, case: dict[str, Any]) -> Result:
        started = time.monotonic()
        if self.stopping:
            return Result(family, case["name"], "skip", reason="not run (stopped)")
        result = Result(family, case["name"], "error" if "expectedException" in case else "output")
        suffix = f"__C{next(self.counter)}C"
        try:
            self._run(case, suffix, result)
        except Exception as exc:  # noqa: BLE001 - a harness failure is the case's result
            result.ok = False
            result.reason = f"harness: {exc!r}"
            result.diff.append(traceback.format_exc())
        finally:
            try:
                self.terminate(suffix)
                for name in created_types(case["statements"]):  # types are the server's
                    self.ksql(f"DROP TYPE IF EXISTS {name};", {})
            except Exception:  # noqa: BLE001, S110 - the next case goes on
                pass
        result.seconds = time.monotonic() - started
        return result

    def _run(self, case: dict[str, Any], suffix: str, result: Result) -> None:
        statements = case["statements"]
        names = created_names(statements)
        renamed = [rename(s, names, suffix) for s in statements]
        properties = {"ksql.streams.auto.offset.reset": "earliest", "auto.offset.reset": "earliest"}
        properties.update({k: str(v) for k, v in case.get("properties", {}).items()})
        # the topics the case's inputs and sources read, made before the statements run
        topics: dict[str, int] = {}
        # a CREATE ... AS SELECT's sink the case lists is left for the statement to make:
        # QTT's driver runs no topic check for it, a real server refuses another count
        sinks = query_sinks(statements) if "expectedException" not in case else set()
        for topic in case.get("topics", []):
            if topic["name"] in sinks:
                continue
            topics[topic["name"] + suffix] = int(topic.get("partitions", 1) or 1)
        # QTT makes a CREATE's topic that "topics" does not list with 4 partitions (its
        # Topic.DEFAULT_PARTITIONS); here with 1, which keeps the records in QTT's order,
        # but with 4 in a case that joins and gives a topic more than one: ksqlDB refuses
        # a join of sources whose partition counts differ
        joins = any(re.search(r"\bJOIN\b", s, re.IGNORECASE) for s in statements)
        counts = {t["name"]: int(t.get("partitions", 1) or 1) for t in case.get("topics", [])}
        inferred = 4 if joins and any(count > 1 for count in counts.values()) else 1
        made = created_topics(renamed, topics, inferred)
        # an input topic a CREATE ... AS SELECT writes too is made first, with the
        # partitions the case lists for it (its statement then finds them as it wants)
        for record in case.get("inputs", []):
            if record["topic"] + suffix not in made:
                topics.setdefault(record["topic"] + suffix, counts.get(record["topic"], 1))
        ids = self.codec.register_topics(case, suffix)
        if topics:
            futures = self.admin.create_topics(
                [NewTopic(t, p, 1) for t, p in topics.items()], operation_timeout=30
            )
            for future in futures.values():
                try:
                    future.result(60)
                except KafkaException:
                    pass  # there already
        failure = None
        for original, statement in zip(statements, renamed, strict=True):
            # a schema id of a topic a statement makes: its id once made
            ok, answer = self.ksql(with_schema_ids(statement, ids), properties)
            if not ok:
                failure = (original, unsuffixed(str(answer.get("message", answer))))
                break
        expected_error = case.get("expectedException")
        if expected_error is not None and processing_failure(expected_error):
            if failure is not None:  # ksqlDB takes the statements, then fails the query
                result.reason = "statement failed"
                result.diff += [f"statement: {failure[0]}", f"error: {failure[1]}"]
                return
            self._run_to_failure(case, suffix, names, statements, result)
            return
        if expected_error is not None:
            wanted = expected_error.get("message")
            if failure is None:
                result.reason = "no error"
                result.diff.append(f"expected error: {wanted}")
                return
            result.ok = wanted is None or error_matches(str(wanted), failure[1])
            if not result.ok:
                result.reason = "other message"
                result.diff += [f"expected: {wanted}", f"actual:   {failure[1]}"]
            return
        if failure is not None:
            result.reason = "statement failed"
            result.diff += [f"statement: {failure[0]}", f"error: {failure[1]}"]
            return
        sources, sinks = self._produce_inputs(case, suffix, names, statements)
        self.compare(case.get("outputs", []), suffix, sources, result, sinks)

    def _produce_inputs(
        self, case: dict[str, Any], suffix: str, names: set[str], statements: list[str]
    ) -> tuple[dict[str, Source], set[str]]:
        """The case's inputs written to its sources; gives the sources and, for a case
        that expects no record at all, its queries' sink topics (read for a while)."""
        sources = self.sources(names, suffix)
        for source in sources.values():
            name = unsuffixed(source.name)
            source.nullable = {s: nullable_setting(name, statements, s) for s in ("KEY", "VALUE")}
        inputs = case.get("inputs", [])
        settle = None
        if in_file_order_only(inputs, suffix, sources):
            settle = lambda: self.settle(suffix)  # noqa: E731
        self.produce(inputs, suffix, sources, settle)
        made = query_sinks(statements) if not case.get("outputs") else set()
        sinks = {s.topic for s in sources.values() if unsuffixed(s.name).upper() in made}
        return sources, sinks

    def _run_to_failure(
        self,
        case: dict[str, Any],
        suffix: str,
        names: set[str],
        statements: list[str],
        result: Result,
    ) -> None:
        """A case whose query fails at a record (a StreamsException in ksqlDB's test
        driver, which then checks no output): the records the case expects, those the
        records before it made, are written (a retry of the query may write them again:
        repeats of them are not extra; a failure to serialize is at one of them, so the
        first ones may be all), and a query of the case has the error in its
        queryErrors."""
        sources, sinks = self._produce_inputs(case, suffix, names, statements)
        # a record that fails to serialize is one the case lists: those before it written
        upto = "serialize" in str(case["expectedException"].get("causeMessage", "")).lower()
        outputs = case.get("outputs", [])
        self.compare(outputs, suffix, sources, result, sinks, repeats=True, upto=upto)
        problem = self.query_error(suffix, case["expectedException"])
        if problem is not None:
            result.ok = False
            result.reason = result.reason or "no query error"
            result.diff.append(problem)

    def query_error(self, suffix: str, expected: dict[str, Any]) -> str | None:
        """None once a query of the case has an error (SHOW QUERIES EXTENDED's
        queryErrors, as ksqlDB keeps its queries' failures) holding the expected message
        and cause message; else what the case's queries have (bounded wait)."""
        wanted = [str(expected[k]) for k in ("message", "causeMessage") if expected.get(k)]
        seen: list[str] = []
        deadline = time.monotonic() + QUERY_ERROR_WAIT_S
        while True:
            ok, answer = self.ksql("SHOW QUERIES EXTENDED;", {})
            seen = []
            for entity in answer if ok else []:
                for query in entity.get("queryDescriptions", []):
                    if suffix.upper() not in str(query.get("id", "")).upper():
                        continue
                    seen += [
                        unsuffixed(str(e.get("errorMessage")))
                        for e in query.get("queryErrors") or []
                    ]
            if any(all(w in message for w in wanted) for message in seen):
                return None
            if time.monotonic() > deadline:
                return f"query errors: expected {' / '.join(wanted)}; got {seen or 'none'}"
            time.sleep(1.0)

    def settle(self, suffix: str) -> None:
        """Returns once every query of the case has read (processed, its output
        written) every record of its sources, as the server reports it: each query's
        consumer offsets in ``DESCRIBE <sink> EXTENDED``'s ``queryOffsetSummaries`` at
        the partitions' log end offsets, in two passes in a row over all of them (a
        query's output read by another written before the first pass saw it caught up
        is seen by the second). Polls the server; bounded by ``SETTLE_WAIT_S``."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        clean = 0
        behind: list[str] = []
        while clean < 2:
            behind = self._behind(suffix)
            clean = clean + 1 if not behind else 0
            if clean < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the case's queries did not read their inputs: {behind}")
                time.sleep(SETTLE_POLL_S)

    def _behind(self, suffix: str) -> list[str]:
        """What the case's queries have not read yet (empty: all read)."""
        ok, answer = self.ksql("SHOW QUERIES;", {})
        if not ok:
            return ["SHOW QUERIES failed"]
        sinks = {
            sink
            for entity in answer
            for query in entity.get("queries", [])
            if suffix.upper() in str(query.get("id", "")).upper()
            for sink in query.get("sinks", [])
        }
        behind: list[str] = []
        for sink in sorted(sinks):
            ok, described = self.ksql(f"DESCRIBE `{sink}` EXTENDED;", {})
            if not ok:
                behind.append(f"DESCRIBE {sink} failed")
                continue
            desc = described[0]["sourceDescription"]
            summaries = desc.get("queryOffsetSummaries") or []
            if len(summaries) < len(desc.get("writeQueries") or []):
                behind.append(f"{sink}: a query not reading yet")
            for summary in summaries:
                for topic in summary["topicSummaries"]:
                    for p in topic["offsets"]:
                        if p["consumerOffset"] < p["logEndOffset"]:
                            behind.append(
                                f"{summary['groupId']} at {p['consumerOffset']} of "
                                f"{topic['kafkaTopic']}-{p['partition']} "
                                f"(end {p['logEndOffset']})"
                            )
        return behind

    def produce(
        self,
        inputs: list[dict[str, Any]],
        suffix: str,
        sources: dict[str, Source],
        settle: Callable[[], None] | None = None,
    ) -> None:
        """Writes the inputs in the file's order; with ``settle``, one at a time,
        each written record followed by ``settle()``."""
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 0})
        for record in inputs:
            topic = record["topic"] + suffix
            source = sources.get(topic)
            key_format = source.key_format if source else "KAFKA"
            value_format = source.value_format if source else "JSON"
            if key_format in REGISTRY_FORMATS:
                key = self.codec.encode(record.get("key"), key_format, topic, True)
            elif key_format == NOSR and source is not None:
                key = encode_nosr(record.get("key"), source.keys, source.nullable.get("KEY"))
            else:
                key = encode(record.get("key"), key_format, source.keys if source else [])
            key = window_key(key, record.get("window"))
            if value_format in REGISTRY_FORMATS:
                value = self.codec.encode(record.get("value"), value_format, topic, False)
            elif value_format == NOSR and source is not None:
                value = encode_nosr(
                    record.get("value"), source.values, source.nullable.get("VALUE")
                )
            else:
                value = encode(record.get("value"), value_format, source.values if source else [])
            timestamp = int(record.get("timestamp", 0))
            if timestamp == 0:
                if producer.flush(60) != 0:
                    raise RuntimeError("inputs not acknowledged")
                self.zero.send([ZeroTimeRecord(topic, key, value)])
            elif key is None:  # alone in its batch: a compacted topic refuses it alone
                if producer.flush(60) != 0:
                    raise RuntimeError("inputs not acknowledged")
                producer.produce(topic, value, key, timestamp=timestamp)
                producer.flush(60)
            else:
                producer.produce(topic, value, key, timestamp=timestamp)
            if settle is not None:
                if producer.flush(60) != 0:
                    raise RuntimeError("inputs not acknowledged")
                settle()
        if producer.flush(60) != 0:
            raise RuntimeError("inputs not acknowledged")

    def compare(
        self,
        outputs: list[dict[str, Any]],
        suffix: str,
        sources: dict[str, Source],
        result: Result,
        sinks: set[str] | None = None,
        repeats: bool = False,
        upto: bool = False,
    ) -> None:
        """The records of each topic the case expects records on, and of the case's
        query sinks it expects none on (read for a short while); with ``repeats``,
        records after the expected ones that repeat one of them are not extra; with
        ``upto``, the first expected ones may be all there is (read for a short while)."""
        expected: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in outputs:
            expected[record["topic"] + suffix].append(record)
        for topic in sorted((sinks or set()) - set(expected)):
            expected[topic] = []
        problems: list[str] = []
        for topic, wanted in expected.items():
            source = sources.get(topic)
            got = self.read(topic, 0 if upto else len(wanted))
            actual = [self.shape(r, source) for r in got]
            written = [as_written(w, source) for w in wanted]
            if repeats:
                actual = actual[: len(written)] + [
                    a for a in actual[len(written) :]
                    if not any(same(w.get("key"), a["key"]) and same(w.get("value"), a["value"])
                               for w in written)
                ]  # fmt: skip
            if upto:
                written = written[: len(actual)]
            problems += self.diff(topic, written, actual)
        result.ok = not problems
        if problems:
            result.reason = problems[0].split(":")[0]
            result.diff += problems

    def read(self, topic: str, count: int) -> list[tuple[bytes | None, bytes | None, int]]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "group.id": f"conformance-{time.monotonic_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        records: list[tuple[bytes | None, bytes | None, int]] = []
        deadline = time.monotonic() + (self.wait_s if count else NO_OUTPUT_WAIT_S)
        try:
            partitions: list[int] = []
            while not partitions and time.monotonic() < deadline:
                found = consumer.list_topics(topic, timeout=10).topics.get(topic)
                if found is not None and found.error is None and found.partitions:
                    partitions = sorted(found.partitions)
                else:
                    time.sleep(0.5)
            if not partitions:
                return records
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            extra_until: float | None = None
            while time.monotonic() < deadline:
                if extra_until is not None and time.monotonic() > extra_until:
                    break
                message = consumer.poll(0.5)
                if len(records) >= count and count and extra_until is None:
                    extra_until = time.monotonic() + EXTRA_WAIT_S
                if message is None or message.error() is not None:
                    continue
                records.append((message.key(), message.value(), message.timestamp()[1]))
        finally:
            consumer.close()
        return records

    def shape(
        self, record: tuple[bytes | None, bytes | None, int], source: Source | None
    ) -> dict[str, Any]:
        key, value, timestamp = record
        shaped: dict[str, Any] = {"timestamp": timestamp}
        key_format = source.key_format if source else "KAFKA"
        if source is not None and source.window and key is not None:
            if source.window.upper() == "SESSION" and len(key) >= 16:
                end, start = struct.unpack(">qq", key[-16:])
                key = key[:-16]
            elif len(key) >= 8:
                (start,) = struct.unpack(">q", key[-8:])
                end = None
                key = key[:-8]
            shaped["window"] = {"start": start, "end": end}
        value_format = source.value_format if source else "JSON"
        if key is not None and key_format in REGISTRY_FORMATS:
            shaped["key"] = self.codec.decode(key, key_format)
        elif key is not None and key_format == NOSR and source is not None:
            shaped["key"] = decode_nosr(key, source.keys, source.nullable.get("KEY"))
        else:
            shaped["key"] = decode(key, key_format, source.keys if source else [])
        if value is not None and value_format in REGISTRY_FORMATS:
            decoded = self.codec.decode(value, value_format)
            shaped["value"] = sink_fields(decoded, source.values if source else [])
        elif value is not None and value_format == NOSR and source is not None:
            shaped["value"] = decode_nosr(value, source.values, source.nullable.get("VALUE"))
        else:
            shaped["value"] = decode(value, value_format, source.values if source else [])
        return shaped

    @staticmethod
    def diff(topic: str, wanted: list[dict[str, Any]], actual: list[dict[str, Any]]) -> list[str]:
        name = unsuffixed(topic)
        problems = []
        if len(actual) != len(wanted):
            problems.append(f"count: {name}: {len(actual)} records, {len(wanted)} expected")
        for i, (w, a) in enumerate(zip(wanted, actual, strict=False)):
            what = []
            if not same(w.get("key"), a["key"]):
                what.append("key")
            if not same(w.get("value"), a["value"]):
                what.append("value")
            if "timestamp" in w and int(w["timestamp"]) != a["timestamp"]:
                what.append("timestamp")
            window = w.get("window")
            if window and (
                "window" not in a
                or int(window["start"]) != a["window"]["start"]
                or (a["window"]["end"] is not None and int(window["end"]) != a["window"]["end"])
            ):
                what.append("window")
            if what:
                problems.append(
                    f"{'/'.join(what)}: {name} #{i}: expected {json.dumps(w)}; "
                    f"got {json.dumps(a, default=str)}"
                )
        for a in actual[len(wanted) :]:
            problems.append(f"extra: {name}: {json.dumps(a, default=str)}")
        for w in wanted[len(actual) :]:
            problems.append(f"missing: {name}: {json.dumps(w)}")
        if problems and len(actual) == len(wanted):
            rest = list(actual)
            for w in wanted:
                hit = next(
                    (a for a in rest if same(w.get("key"), a["key"])
                     and same(w.get("value"), a["value"])),
                    None,
                )  # fmt: skip
                if hit is None:
                    break
                rest.remove(hit)
            else:
                problems.insert(0, f"order: {name}: the expected records, in another order")
        return problems


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="a directory of .json files or ksqlDB's git dir")
    parser.add_argument("--tree", default=TREE, help="the cases' path inside a git dir")
    parser.add_argument("--files", default="*.json", help="file names to run (a glob)")
    parser.add_argument("--case", default="", help="only cases whose name holds this")
    parser.add_argument("--jobs", type=int, default=4, help="cases run at a time")
    parser.add_argument(
        "--only", choices=("errors", "outputs"), help="only the cases expecting errors, or outputs"
    )
    parser.add_argument("--out", type=Path, help="a directory for per-case diff files")
    parser.add_argument(
        "--wait", type=float, default=OUTPUT_WAIT_S, help="seconds to wait for a case's records"
    )
    parser.add_argument(
        "--rerun",
        type=Path,
        help="a results.jsonl of an earlier run (--out): run only the cases it failed",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        help="a results.jsonl of an earlier run (--out), stopped or not: run the cases it "
        "failed and those it did not reach",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        nargs="+",
        help="results.jsonl files: print their summary (a later file's result of a case "
        "replaces an earlier one's) instead of running cases",
    )
    args = parser.parse_args()
    earlier: dict[tuple[str, str], dict[str, Any]] = {}
    for file in args.summary or [f for f in (args.rerun, args.resume) if f is not None]:
        for line in file.read_text().splitlines():
            row = json.loads(line)
            earlier[(row["family"], row["name"])] = row

    families = load_families(args.path, args.tree, args.files)
    planned: list[tuple[str, dict[str, Any]]] = []
    results: list[Result] = []
    for family, tests in families.items():
        for test in tests:
            for case in expand(test):
                if args.case.lower() not in case["name"].lower():
                    continue
                if args.only and ("expectedException" in case) != (args.only == "errors"):
                    continue
                reason = not_runnable(case)
                before = earlier.get((family, case["name"]))
                if reason:
                    results.append(Result(family, case["name"], "skip", reason=reason))
                elif args.summary:
                    if before is None:
                        reason = "not run"
                        results.append(Result(family, case["name"], "skip", reason=reason))
                    else:
                        results.append(rejudged(Result(**before)))
                elif args.rerun and (before is None or before["ok"]):
                    continue
                elif args.resume and before is not None and before["ok"]:
                    continue
                else:
                    planned.append((family, case))
    if args.summary:
        summary(results)
        return
    # error cases first (no Spark query), then the others taken from the families in
    # turn, so that a sweep stopped early (Ctrl-C) has seen every family
    rank: Counter[str] = Counter()
    order = []
    for family, case in planned:
        rank[family] += 1
        order.append(("expectedException" not in case, rank[family], family))
    planned = [fc for _, fc in sorted(zip(order, planned, strict=True), key=lambda x: x[0])]
    print(f"{len(planned)} cases to run, {len(results)} not runnable", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ksql-conformance-") as work:
        harness = Harness(Path(work), args.jobs, args.wait)
        pool = ThreadPoolExecutor(args.jobs)
        try:
            futures = [pool.submit(harness.run, *fc) for fc in planned]
            for future in as_completed(futures):
                report(future.result(), args.out)
                results.append(future.result())
        except KeyboardInterrupt:
            print("stopped: the summary of the cases run so far", flush=True)
            harness.stopping = True
            for future in futures:
                future.cancel()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            harness.stop()
    summary(results)


def rejudged(result: Result) -> Result:
    """An error case's result of an earlier run judged by this comparison (its diff
    keeps the expected and the actual message)."""
    if result.kind != "error" or result.ok or len(result.diff) < 2:
        return result
    wanted, actual = result.diff[0], result.diff[1]
    if wanted.startswith("expected: ") and actual.startswith("actual:   "):
        result.ok = error_matches(wanted[len("expected: ") :], actual[len("actual:   ") :])
    return result


def processing_failure(expected: dict[str, Any]) -> bool:
    """Whether a case's expected exception is its query's failure at a record (Kafka
    Streams' StreamsException out of ksqlDB's test driver), not a statement's error."""
    return str(expected.get("type", "")).endswith(".StreamsException")


def error_matches(wanted: str, actual: str) -> bool:
    """ksqlDB's exceptions add the statement, which its REST API gives apart; the place
    is left out of both."""
    wanted_text = PLACE_RE.sub("", wanted.split("\nStatement: ")[0])
    return wanted_text in PLACE_RE.sub("", actual)


def report(done: Result, out: Path | None) -> None:
    mark = "ok  " if done.ok else "FAIL"
    print(
        f"{mark} {done.kind:6} {done.family} / {done.name} "
        f"({done.seconds:.0f} s){'' if done.ok else ': ' + done.reason}",
        flush=True,
    )
    if out is not None:
        with open(out / "results.jsonl", "a") as log:
            log.write(json.dumps(done.__dict__) + "\n")
        if not done.ok:
            file = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{done.family}--{done.name}")
            (out / f"{file[:150]}.txt").write_text("\n".join(done.diff) + "\n")


def summary(results: list[Result]) -> None:
    by_family: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_family[result.family].append(result)
    print("\nfamily: outputs matched/runnable, errors matched/expected, not runnable")
    for family, items in sorted(by_family.items()):
        out = [r for r in items if r.kind == "output"]
        err = [r for r in items if r.kind == "error"]
        skip = [r for r in items if r.kind == "skip"]
        print(
            f"  {family}: {sum(r.ok for r in out)}/{len(out)}, "
            f"{sum(r.ok for r in err)}/{len(err)}, {len(skip)}"
        )
    out = [r for r in results if r.kind == "output"]
    err = [r for r in results if r.kind == "error"]
    matched = sum(r.ok for r in out)
    print(
        f"\noverall: {matched}/{len(out)} runnable cases matched record for record "
        f"({100 * matched / max(len(out), 1):.0f}%) in "
        f"{len({r.family for r in out})} families; "
        f"{sum(r.ok for r in err)}/{len(err)} expected errors matched"
    )
    reasons = Counter(r.reason for r in results if r.kind == "skip")
    print("not runnable: " + ", ".join(f"{n} {why}" for why, n in reasons.most_common()))
    failures = Counter(r.reason.split(":")[0] for r in out if not r.ok)
    print("output failures: " + ", ".join(f"{n} {why}" for why, n in failures.most_common()))


if __name__ == "__main__":
    main()
