"""``strom ksql``: an interactive client of a ksql server (Strom's or ksqlDB's), as
ksqlDB's CLI is.

    strom ksql [URL] [--execute STATEMENTS | --file FILE] [--define NAME=VALUE ...]
               [--output TABULAR|JSON]

URL defaults to $STROM_KSQL_URL, else http://localhost:8088. Interactive, it reads
statements ending with ``;`` at the ``ksql>`` prompt (``exit`` or Ctrl-D to leave);
``--execute`` runs the statements given, ``--file`` those of a file, then exits. As in
ksqlDB's CLI, ``SET`` / ``UNSET`` change the properties sent with each statement,
``DEFINE`` / ``UNDEFINE`` the variables, and ``RUN SCRIPT 'file'`` runs a file's
statements; PRINT shows the topic's records as the server streams them, and SELECT a
query's rows (``/query-stream``; Ctrl-C stops either); every other statement goes to
the server, and its answer prints as
ksqlDB's CLI prints it (its dashed tables), or as the server's JSON with ``--output JSON``.

A statement the server refuses prints its message; non-interactive, the statements after
it are not run and the exit code is 1. A server that cannot be reached is one line and
exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

from rich.console import Console
from rich.text import Text

from strom.cli.common import ToolError, parse_properties
from strom.ksql import statements as st
from strom.ksql.parser import KsqlSyntaxError, parse_statement, split_statements, substitute
from strom.ksql.rest_client import (
    DELIMITED_MEDIA_TYPE,
    KsqlRestClient,
    KsqlServerError,
    KsqlUnreachable,
)

DEFAULT_URL = os.environ.get("STROM_KSQL_URL") or "http://localhost:8088"
PROMPT = "ksql> "
HELP = """\
Statements end with ';' and may span lines; they go to the server, except:
  SET 'property' = 'value';    a property sent with each statement (UNSET 'property';)
  DEFINE name = 'value';       a variable for ${name} (UNDEFINE name;)
  RUN SCRIPT 'file.sql';       the statements of a file
  SELECT ... EMIT CHANGES;     a push query: its rows as they come (Ctrl-C stops it)
  SELECT ... ;                 a pull query: a table's current rows
  PRINT 'topic' [FROM BEGINNING] [LIMIT n];   a topic's records
For example: SHOW STREAMS; SHOW TABLES; SHOW TOPICS; SHOW QUERIES; DESCRIBE name [EXTENDED];
EXPLAIN query_id; PAUSE query_id; RESUME query_id; TERMINATE query_id;
DROP STREAM name [DELETE TOPIC]; SHOW FUNCTIONS;
'exit' or Ctrl-D leaves."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("ksql", help="a ksql CLI: run statements on a ksql server")
    parser.add_argument(
        "url", nargs="?", default=DEFAULT_URL, help=f"the ksql server (default {DEFAULT_URL})"
    )
    given = parser.add_mutually_exclusive_group()
    given.add_argument("-e", "--execute", metavar="STATEMENTS", help="run these and exit")
    given.add_argument("-f", "--file", metavar="FILE", help="run a file's statements and exit")
    parser.add_argument(
        "-d",
        "--define",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable for ${NAME} (repeatable)",
    )
    parser.add_argument("--output", type=str.upper, choices=["TABULAR", "JSON"], default="TABULAR")
    parser.set_defaults(run=run, parser=parser)


class StatementFailed(Exception):
    """A statement the server (or the CLI) refused; already printed."""


class KsqlShell:
    """The CLI's session: its server, properties and variables, and the printing."""

    def __init__(self, url: str, variables: dict[str, str], json_output: bool) -> None:
        self.client = KsqlRestClient(url)
        self.properties: dict[str, str] = {}
        self.variables = variables
        self.json_output = json_output
        # Text is never cut into lines (a statement, a message), tables fit the width.
        self.console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
        self.errors = Console(stderr=True, soft_wrap=True)

    def run_text(self, text: str) -> None:
        """Each statement of ``text`` in order; ``StatementFailed`` at the first refused."""
        for piece in split_statements(text):
            self.run_statement(piece)

    def run_statement(self, text: str) -> None:
        try:
            statement: st.Statement | None = parse_statement(substitute(text, self.variables))
        except KsqlSyntaxError:
            statement = None  # the server answers with ksqlDB's syntax error
        if isinstance(statement, st.SetProperty):
            old = self.properties.get(statement.name)
            self.properties[statement.name] = statement.value
            self._note(
                f"Successfully changed local property '{statement.name}'"
                + (f" from '{old}'" if old is not None else "")
                + f" to '{statement.value}'."
            )
        elif isinstance(statement, st.UnsetProperty):
            old = self.properties.pop(statement.name, None)
            self._note(f"Successfully unset local property '{statement.name}' (value was '{old}').")
        elif isinstance(statement, st.DefineVariable):
            self.variables[statement.name] = statement.value
        elif isinstance(statement, st.UndefineVariable):
            if self.variables.pop(statement.name, None) is None:
                self._note(f"Variable '{statement.name}' is undefined")
        elif isinstance(statement, st.RunScript):
            self.run_file(statement.path)
        elif isinstance(statement, st.PrintTopic):
            self._print(text)
        elif isinstance(statement, st.Query):
            self._query(text, statement.limit)
        else:
            self._send(text)

    def run_file(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            self.errors.print(Text(f"Failed to read file: {path}: {exc.strerror}", style="red"))
            raise StatementFailed() from None
        self.run_text(text)

    def _send(self, text: str) -> None:
        try:
            entities = self.client.ksql(text + ";", self.properties, self.variables)
        except KsqlServerError as exc:
            self._refused(exc)
        for entity in entities:
            self.show(entity)

    def _refused(self, exc: KsqlServerError) -> NoReturn:
        """The server refused the statement: its message (or JSON), and stop."""
        if self.json_output:
            self.console.print_json(json.dumps(exc.body))
        else:
            self.errors.print(Text(str(exc), style="red"))
        raise StatementFailed() from None

    def _print(self, text: str) -> None:
        """PRINT: the server's lines as they come, until LIMIT or Ctrl-C."""
        body = {"ksql": text + ";", "streamsProperties": self.properties}
        try:
            for line in self.client.lines("/query", body):
                if line:
                    self.console.print(Text(line))
        except KsqlServerError as exc:
            self.errors.print(Text(str(exc), style="red"))
            raise StatementFailed() from None
        except KeyboardInterrupt:
            pass

    def _query(self, text: str, limit: int | None = None) -> None:
        """SELECT: a push query's rows as the server streams them (until its LIMIT or
        Ctrl-C), a pull query's all at once, on ``/query-stream`` as ksqlDB's CLI does."""
        body = {"sql": text + ";", "properties": self.properties,
                "sessionVariables": self.variables}  # fmt: skip
        rows = 0
        try:
            for line in self.client.lines("/query-stream", body, DELIMITED_MEDIA_TYPE):
                if not line.strip():
                    continue
                item = json.loads(line)
                if isinstance(item, list):
                    self._row(item)
                    rows += 1
                elif isinstance(item, dict) and "columnNames" in item:
                    self._header(item)
                else:  # an error in the stream
                    message = item.get("message", line) if isinstance(item, dict) else line
                    self.errors.print(Text(str(message), style="red"))
                    raise StatementFailed()
        except KsqlServerError as exc:
            self._refused(exc)
        except KeyboardInterrupt:
            pass
        if limit is not None and rows >= limit:
            self._note("Limit Reached")  # the final message ksqlDB's /query sends its CLI
        self._note("Query terminated")  # as ksqlDB's CLI ends a query's rows

    def _header(self, header: dict[str, Any]) -> None:
        if self.json_output:
            self.console.print_json(json.dumps(header))
        else:
            if self.console.is_terminal:  # ksqlDB's CLI shows it on its status line
                self.console.print(Text("Press CTRL-C to interrupt", style="dim"))
            self.console.print(Text(tabular_row(header["columnNames"], self._width(), True)))

    def _row(self, values: list[Any]) -> None:
        if self.json_output:
            self.console.print_json(json.dumps(values))
            return
        cells = [java_text(value) for value in values]
        self.console.print(Text(tabular_row(cells, self._width())))

    def _width(self) -> int:
        """The terminal's width (read again for each row, as ksqlDB's CLI does), 200
        when the output is not a terminal."""
        return self.console.size.width

    def _note(self, text: str) -> None:
        if not self.json_output:
            self.console.print(Text(text))

    # ---- printing the server's answers
    def show(self, entity: dict[str, Any]) -> None:
        if self.json_output:
            self.console.print_json(json.dumps(entity))
            return
        self.console.print()  # ksqlDB's CLI opens each answer with a blank line
        kind = entity.get("@type")
        printer = getattr(self, f"_show_{kind}", None)
        if printer is None:
            self.console.print_json(json.dumps(entity))
        else:
            printer(entity)
        for warning in entity.get("warnings") or []:  # and closes it with its warnings
            self.console.print(Text(f"WARNING: {warning.get('message', '')}"))

    def _table(self, *columns: str, rows: list[list[Any]]) -> None:
        """A table as ksqlDB's CLI prints one (its ``Table``): each column as wide as its
        widest cell, cells between `` | ``, the header and the end under a dashed line."""
        self.console.print(Text(ascii_table(list(columns), rows, self._width())))

    def _show_currentStatus(self, entity: dict[str, Any]) -> None:  # noqa: N802 - ksqlDB's name
        self._table("Message", rows=[[entity["commandStatus"]["message"]]])

    def _show_assert_topic(self, entity: dict[str, Any]) -> None:
        existence = "exists" if entity.get("exists") else "does not exist"
        self.console.print(Text(f"Topic {entity.get('topicName')} {existence}."))

    def _show_assert_schema(self, entity: dict[str, Any]) -> None:
        existence = "exists" if entity.get("exists") else "does not exist"
        subject = f" subject {entity['subject']}" if entity.get("subject") is not None else ""
        schema_id = f" id {entity['id']}" if entity.get("id") is not None else ""
        self.console.print(Text(f"Schema with{subject}{schema_id} {existence}."))

    def _show_warning_entity(self, entity: dict[str, Any]) -> None:
        self.console.print(Text(entity.get("message", ""), style="yellow"))

    def _sources(self, entity: dict[str, Any], key: str, label: str) -> None:
        rows = [
            [s["name"], s["topic"], s["keyFormat"], s["valueFormat"], str(s["isWindowed"]).lower()]
            for s in entity[key]
        ]
        self._table(
            f"{label} Name", "Kafka Topic", "Key Format", "Value Format", "Windowed", rows=rows
        )

    def _show_streams(self, entity: dict[str, Any]) -> None:
        self._sources(entity, "streams", "Stream")

    def _show_tables(self, entity: dict[str, Any]) -> None:
        self._sources(entity, "tables", "Table")

    def _show_kafka_topics(self, entity: dict[str, Any]) -> None:
        rows = [
            [t["name"], len(t["replicaInfo"]), _replicas(t["replicaInfo"])]
            for t in entity["topics"]
        ]
        self._table("Kafka Topic", "Partitions", "Partition Replicas", rows=rows)

    def _show_kafka_topics_extended(self, entity: dict[str, Any]) -> None:
        rows = [
            [
                t["name"],
                len(t["replicaInfo"]),
                _replicas(t["replicaInfo"]),
                t["consumerCount"],
                t["consumerGroupCount"],
            ]
            for t in entity["topics"]
        ]
        self._table(
            "Kafka Topic", "Partitions", "Partition Replicas", "Consumers", "ConsumerGroups",
            rows=rows,
        )  # fmt: skip

    def _show_properties(self, entity: dict[str, Any]) -> None:
        rows = [[p["name"], p["scope"], p["value"]] for p in entity["properties"]]
        self._table("Property", "Scope", "Value", rows=rows)

    def _show_queries(self, entity: dict[str, Any]) -> None:
        rows = [
            [q["id"], q.get("queryType", ""), _status_count(q), ",".join(q.get("sinks", [])),
             ",".join(q.get("sinkKafkaTopics", [])), q.get("queryString", "")]
            for q in entity["queries"]
        ]  # fmt: skip
        self._table(
            "Query ID", "Query Type", "Status", "Sink Name", "Sink Kafka Topic", "Query String",
            rows=rows,
        )  # fmt: skip

    def _show_function_names(self, entity: dict[str, Any]) -> None:
        rows = [[f["name"], f["category"]] for f in entity["functions"]]
        self._table("Function Name", "Category", rows=rows)

    def _show_describe_function(self, entity: dict[str, Any]) -> None:
        self.console.print(
            Text(
                f"Name        : {entity['name']}\nAuthor      : {entity['author']}\n"
                f"Overview    : {entity['description']}\nType        : {entity['type']}\n"
                f"Variations  :"
            )
        )
        for variant in entity["functions"]:
            arguments = ", ".join(f"{a['name']} {a['type']}" for a in variant["arguments"])
            self.console.print(
                Text(
                    f"\n\tVariation   : {entity['name']}({arguments})\n"
                    f"\tReturns     : {variant['returnType']}\n"
                    f"\tDescription : {variant['description']}"
                )
            )

    def _show_type_list(self, entity: dict[str, Any]) -> None:
        rows = [[name, _schema_text(schema)] for name, schema in entity["types"].items()]
        self._table("Type Name", "Schema", rows=rows)

    def _show_variables(self, entity: dict[str, Any]) -> None:
        rows = [[v["name"], v["value"]] for v in entity["variables"]]
        self._table("Variable Name", "Value", rows=rows)

    # ---- the connector statements, as ksqlDB's CLI prints them
    def _show_connector_info(self, entity: dict[str, Any]) -> None:
        self._table("Message", rows=[[f"Created connector {entity['info']['name']}"]])

    def _show_drop_connector(self, entity: dict[str, Any]) -> None:
        self._table("Message", rows=[[f'Dropped connector "{entity["connectorName"]}"']])

    def _show_connector_list(self, entity: dict[str, Any]) -> None:
        rows = [
            [c["name"], str(c.get("type") or "unknown").upper(), c.get("className") or "",
             c.get("state") or ""]
            for c in entity["connectors"]
        ]  # fmt: skip
        self._table("Connector Name", "Type", "Class", "Status", rows=rows)

    def _show_connector_plugins_list(self, entity: dict[str, Any]) -> None:
        rows = [
            [p["className"], str(p.get("type") or "unknown").upper(), p.get("version") or ""]
            for p in entity["connectorsPlugins"]
        ]
        self._table("Class", "Type", "Version", rows=rows)

    def _show_connector_description(self, entity: dict[str, Any]) -> None:
        status = entity["status"]
        connector = status.get("connector") or {}
        lines = [
            f"{'Name':<20} : {status.get('name')}",
            f"{'Class':<20} : {entity.get('connectorClass')}",
            f"{'Type':<20} : {status.get('type')}",
            f"{'State':<20} : {connector.get('state')}",
            f"{'WorkerId':<20} : {connector.get('worker_id')}",
        ]
        if connector.get("trace"):
            lines.append(f"{'Trace':<20} : {connector['trace']}")
        self.console.print(Text("\n".join(lines)))
        if status.get("tasks"):
            self.console.print()
            rows = [[t.get("id"), t.get("state"), t.get("trace") or ""] for t in status["tasks"]]
            self._table("Task ID", "State", "Error Trace", rows=rows)
        if entity.get("sources"):
            self.console.print()
            rows = [[s["name"], s["topic"], s["type"]] for s in entity["sources"]]
            self._table("KSQL Source Name", "Kafka Topic", "Type", rows=rows)
        if entity.get("topics"):
            self.console.print()
            self._table("Related Topics", rows=[[t] for t in entity["topics"]])

    def _show_sourceDescription(self, entity: dict[str, Any]) -> None:  # noqa: N802
        self._describe(entity["sourceDescription"])

    def _show_source_descriptions(self, entity: dict[str, Any]) -> None:
        for description in entity["sourceDescriptions"]:
            self._describe(description)

    def _describe(self, description: dict[str, Any]) -> None:
        header = f"Name                 : {description['name']}"
        timestamp = description["timestamp"] or "Not set - using <ROWTIME>"
        if description.get("extended"):
            header += (
                f"\nType                 : {description['type']}"
                f"\nTimestamp field      : {timestamp}"
                f"\nKey format           : {description['keyFormat']}"
                f"\nValue format         : {description['valueFormat']}"
                f"\nKafka topic          : {description['topic']} "
                f"(partitions: {description['partitions']}, "
                f"replication: {description['replication']})"
                f"\nStatement            : {description['statement']}\n"  # then a blank line
            )
        self.console.print(Text(header))
        self._fields(
            description["fields"], description["type"] == "TABLE", description.get("windowType")
        )
        if description.get("extended"):
            kind = description["type"]
            self._queries_of(description.get("readQueries") or [], f"read from this {kind}")
            self._queries_of(description.get("writeQueries") or [], f"write from this {kind}")
            self._statistics(description)
        else:
            self.console.print(
                Text(
                    "For runtime statistics and query details run: DESCRIBE <Stream,Table> "
                    "EXTENDED;"
                )
            )

    def _statistics(self, description: dict[str, Any]) -> None:
        """DESCRIBE EXTENDED's runtime statistics and consumer groups, as ksqlDB's CLI
        prints them: the figures by host when the server gives them so, else its lines;
        then each query's offsets and lag on each partition of its topics."""
        stats = description.get("clusterStatistics") or []
        errors = description.get("clusterErrorStats") or []
        if not stats and not errors:
            self.console.print(Text(f"\n{'Local runtime statistics':<20}\n{'-' * 24}"))
            self.console.print(Text(str(description.get("statistics") or "")))
            self.console.print(Text(str(description.get("errorStats") or "")))
        else:
            self.console.print(Text(f"\n{'Runtime statistics by host':<20}\n{'-' * 25}"))
            ranked = sorted([*stats, *errors], key=lambda s: (str(s["host"]), str(s["name"])))
            rows = [
                [str(s["host"]), str(s["name"]), f"{float(s.get('value') or 0):10.0f}",
                 str(s.get("timestamp", ""))]
                for s in ranked
            ]  # fmt: skip
            self._table("Host", "Metric", "Value", "Last Message", rows=rows)
        self.console.print(
            Text(
                "(Statistics of the local KSQL server interaction with the Kafka topic "
                f"{description.get('topic')})"
            )
        )
        summaries = description.get("queryOffsetSummaries") or []
        if summaries:
            self.console.print(Text("\nConsumer Groups summary:"))
        for summary in summaries:
            self.console.print(Text(f"\n{'Consumer Group':<20} : {summary.get('groupId')}"))
            topics = summary.get("topicSummaries") or []
            if not topics:
                self.console.print(Text("<no offsets committed by this group yet>"))
            for topic in topics:
                offsets = topic.get("offsets") or []
                lags = [o["logEndOffset"] - o["consumerOffset"] for o in offsets]
                self.console.print(
                    Text(
                        f"\n{'Kafka topic':<20} : {topic.get('kafkaTopic')}"
                        f"\n{'Max lag':<20} : {max(lags, default=0)}\n"
                    )
                )
                rows = [
                    [str(o["partition"]), str(o["logStartOffset"]), str(o["logEndOffset"]),
                     str(o["consumerOffset"]), str(lag)]
                    for o, lag in zip(offsets, lags, strict=True)
                ]  # fmt: skip
                self._table("Partition", "Start Offset", "End Offset", "Offset", "Lag", rows=rows)

    def _fields(
        self, fields: list[dict[str, Any]], is_table: bool, window: str | None = None
    ) -> None:
        """The schema as ksqlDB's CLI prints it: a key's or header's type padded to 16,
        then ``(key)`` / ``(primary key)`` and the window type, or ``(headers)`` /
        ``(header('k'))``."""
        rows = []
        for field in fields:
            text = _schema_text(field["schema"])
            if field.get("type") == "KEY":
                marker = "(primary key)" if is_table else "(key)"
                if window:
                    marker += f" (Window type: {window})"
                text = f"{text:<16} {marker}"
            elif field.get("type") == "HEADER":
                key = field.get("headerKey")
                text = f"{text:<16} " + ("(headers)" if key is None else f"(header('{key}'))")
            rows.append([field["name"], text])
        if rows:
            self._table("Field", "Type", rows=rows)

    def _heading(self, title: str, lines: list[str]) -> None:
        """A section of DESCRIBE EXTENDED or EXPLAIN: a blank line, the title underlined,
        then its lines."""
        self.console.print(Text(f"\n{title}\n{'-' * len(title)}"))
        for line in lines:
            self.console.print(Text(line))

    def _queries_of(self, queries: list[dict[str, Any]], what: str) -> None:
        if not queries:
            return
        self._heading(
            f"Queries that {what}",
            [
                f"{q['id']} ({q.get('state') or 'N/A'}) : "
                + " ".join(q.get("queryString", "").split())
                for q in queries
            ],
        )
        self.console.print(
            Text("\nFor query topology and execution plan please run: EXPLAIN <QueryId>")
        )

    def _show_queryDescription(self, entity: dict[str, Any]) -> None:  # noqa: N802
        self._describe_query(entity["queryDescription"])

    def _show_query_descriptions(self, entity: dict[str, Any]) -> None:
        for description in entity["queryDescriptions"]:
            self._describe_query(description)
            self.console.print()

    def _describe_query(self, query: dict[str, Any]) -> None:
        """EXPLAIN and SHOW QUERIES EXTENDED, as ksqlDB's CLI prints a query."""
        lines = [f"{'ID':<20} : {query['id']}", f"{'Query Type':<20} : {query['queryType']}"]
        if query.get("statementText"):
            lines.append(f"{'SQL':<20} : {query['statementText']}")
        hosts = query.get("ksqlHostQueryStatus") or {}
        if hosts:
            status = ", ".join(f"{host}={state}" for host, state in hosts.items())
            lines.append(f"{'Host Query Status':<20} : {{{status}}}")
        self.console.print(Text("\n".join(lines) + "\n"))
        self._fields(query.get("fields") or [], False, query.get("windowType"))
        for title, names, hint in (
            ("Sources that this query reads from:", query.get("sources"), "source"),
            ("Sinks that this query writes to:", query.get("sinks"), "sink"),
        ):  # fmt: skip
            if names:
                self._heading(title, list(names))
                self.console.print(
                    Text(
                        f"\nFor {hint} description please run: "
                        f"DESCRIBE [EXTENDED] <{hint.title()}Id>"
                    )
                )
        if query.get("executionPlan"):
            self._heading("Execution plan", [query["executionPlan"]])
        if query.get("topology"):
            self._heading("Processing topology", [query["topology"]])
        overridden = query.get("overriddenProperties") or {}
        if overridden:
            self._heading("Overridden Properties", [])
            rows = [[name, str(overridden[name])] for name in sorted(overridden)]
            self._table("Property", "Value", rows=rows)
        for error in query.get("queryErrors") or []:
            self.console.print(
                Text(f"\n{'Error Details':<20} : {error.get('errorMessage', '')}", style="red")
            )


def ascii_table(columns: list[str], rows: list[list[Any]], width: int) -> str:
    """``columns`` and ``rows`` laid out as ksqlDB's CLI lays out a table; the dashed
    lines no longer than ``width``."""
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [
        max([len(name)] + [max(map(len, row[i].split("\n"))) for row in cells])
        for i, name in enumerate(columns)
    ]
    rule = "-" * min(width, sum(w + 3 for w in widths) - 1)

    def line(values: list[str]) -> str:
        return " " + " | ".join(f"{v:<{w}}" for v, w in zip(values, widths, strict=True)) + " "

    return "\n".join([line(columns), rule, *(line(row) for row in cells), rule])


def java_text(value: Any) -> str:
    """A value of a query's row as ksqlDB's CLI prints it: the Java ``toString`` of what
    its JSON reads as (``[a, b]``, ``{K=v}``, ``null``, ``1.0E7``), strings bare."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(java_text, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={java_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _java_double(value: float) -> str:
    """Java's ``Double.toString``: plain from 10^-3 up to 10^7, else ``d.dddE<n>``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # the shortest digits, as Java's, and never an exponent here
    # the fewest digits after the point that give the value back (repr's digits)
    places = next(p for p in range(1, 18) if float(f"{value:.{p}e}") == value)
    digits, exponent = f"{value:.{places}e}".split("e")
    return f"{digits}E{int(exponent)}"


def tabular_row(cells: list[str], width: int, header: bool = False) -> str:
    """A row of a streamed query as ksqlDB's CLI prints it: each cell the console's
    width shared among the columns (at least 5 characters), a value longer than its cell
    continued on the next lines, a header between ``+-----+`` lines."""
    if not cells:
        return ""
    size = max(width // len(cells) - 2, 5)
    parts = [[value[i : i + size] for i in range(0, len(value), size)] or [""] for value in cells]
    height = max(len(chunks) for chunks in parts)
    lines = [
        "|" + "".join(f"{chunks[i] if i < len(chunks) else '':<{size}}|" for chunks in parts)
        for i in range(height)
    ]
    if header:
        rule = "+" + ("-" * size + "+") * len(cells)
        lines = [rule, *lines, rule]
    return "\n".join(lines)


def _status_count(query: dict[str, Any]) -> str:
    """A query's statuses as ksqlDB's CLI shows its statusCount: ``RUNNING:1``,
    ``PAUSED:1``..., in the order of ksqlDB's KsqlQueryStatus."""
    counts = query.get("statusCount") or {}
    if not counts:
        return str(query.get("state", ""))
    order = ("RUNNING", "ERROR", "UNRESPONSIVE", "PAUSED")
    ranked = sorted(counts, key=lambda s: order.index(s) if s in order else len(order))
    return ",".join(f"{status}:{counts[status]}" for status in ranked)


def _replicas(counts: list[int]) -> str:
    """A topic's replicas per partition as ksqlDB's CLI shows them: one number when all
    partitions have as many, else each partition's."""
    if not counts:
        return "0"
    return str(counts[0]) if len(set(counts)) == 1 else ", ".join(map(str, counts))


def _schema_text(schema: dict[str, Any]) -> str:
    """A REST schema as ksqlDB's CLI writes a type."""
    kind = schema["type"]
    if kind == "ARRAY":
        return f"ARRAY<{_schema_text(schema['memberSchema'])}>"
    if kind == "MAP":
        return f"MAP<STRING, {_schema_text(schema['memberSchema'])}>"
    if kind == "STRUCT":
        fields = ", ".join(f"`{f['name']}` {_schema_text(f['schema'])}" for f in schema["fields"])
        return f"STRUCT<{fields}>"
    if kind == "DECIMAL":
        parameters = schema.get("parameters") or {}
        return f"DECIMAL({parameters.get('precision')}, {parameters.get('scale')})"
    if kind == "STRING":
        return "VARCHAR(STRING)"
    return str(kind)


def _interactive(shell: KsqlShell) -> int:
    try:
        info = shell.client.info()
    except (KsqlServerError, KsqlUnreachable) as exc:
        raise ToolError(str(exc)) from None
    shell.console.print(
        Text(
            f"Strom ksql CLI, server {shell.client.url} "
            f"(version {info.get('version', '?')}, service {info.get('ksqlServiceId', '?')})\n"
            "Statements end with ';'. 'help' lists what you can type; 'exit' or Ctrl-D leaves."
        )
    )
    if sys.stdin.isatty():
        try:  # line editing and the session's history at the prompt (arrow keys)
            import readline  # noqa: F401
        except ImportError:  # not on every platform
            pass
    pending = ""
    while True:
        try:
            line = input(PROMPT if not pending else "   > ")
        except EOFError:
            shell.console.print()
            return 0
        except KeyboardInterrupt:
            shell.console.print()
            pending = ""
            continue
        word = line.strip().rstrip(";").strip().lower()
        if not pending and word in ("exit", "quit"):
            return 0
        if not pending and word == "help":
            shell.console.print(Text(HELP))
            continue
        pending += line + "\n"
        pieces = split_statements(pending)
        if not pieces:
            pending = ""
            continue
        if not pending.rstrip().endswith(";"):
            continue
        try:
            shell.run_text(pending)
        except StatementFailed:
            pass
        except KsqlUnreachable as exc:
            shell.errors.print(Text(str(exc), style="red"))
        pending = ""


def run(args: argparse.Namespace) -> int:
    variables = parse_properties(args.parser, args.define, "--define")
    shell = KsqlShell(args.url, {k.lower(): v for k, v in variables.items()}, args.output == "JSON")
    try:
        if args.execute is not None:
            shell.run_text(args.execute)
            return 0
        if args.file is not None:
            shell.run_file(args.file)
            return 0
        return _interactive(shell)
    except StatementFailed:
        return 1
    except KsqlUnreachable as exc:
        raise ToolError(str(exc)) from None
