"""ksqlDB conformance: ksqlDB's REST query validation tests (RQTT) run against Strom.

Measures how many of ksqlDB's REST test cases (``rest-query-validation-tests/*.json``
of ksqlDB's repository: INSERT VALUES, pull queries, push queries) Strom's ksql server
answers as ksqlDB does. The case files are read at run time from the path given (a
directory of ``.json`` files, or ksqlDB's bare git dir); they may hold
``//`` and ``/* */`` comments (ksqlDB's loader allows them), which are taken out. From
a git dir they are read at ``--ref`` (v0.29.0 unless told).

The processes (a broker, a schema registry, a ksql server), the suffixing of a case's
names (``__C<n>C``) and the writing of its inputs are ``ksql_conformance.py``'s. Each
case is run as ksqlDB's ``RestTestExecutor`` runs it: its statements up to the first
one starting ``SELECT `` (the admin statements) go in one ``/ksql`` request; an error
answer ends the case, which passes if it expects an error and the answer matches it
(``expectedError``: the ``status``; the ``message`` contained in the error's; a ``type``
``KsqlStatementErrorMessage`` a ``statement_error``). Else its inputs are written (a case
with ``inputConditions.waitForActivePushQuery``: once its only query's header has come,
and the server lists a push query, plus a second for it to be reading), the case's
persistent queries waited for until they have read all their inputs (their consumer
offsets, as ``ksql_conformance.py`` waits), then each query sent on ``/query`` (its
answer: a JSON array of ``header``, ``row``, ``finalMessage``, ``errorMessage``
objects). The case's properties go with every request (``streamsProperties``); when
they set no ``auto.offset.reset``, ``earliest``, as ksqlDB's test server is configured, and
its ``ksql.query.push.v2.enabled=true`` (``SERVER_SETTINGS``) unless they set it.
The responses (one per admin statement's entity, one per query) are then compared
with the expected ones as ksqlDB's executor compares them: a response holds at least
as many entries as expected; an expected object only the fields it gives (``name|
starts_with`` a prefix; ``{STATEMENT}`` the statement); a query's rows as many as
expected, each compared in place, but the rows' ``columns`` compared as a multiset
unless ``outputConditions.verifyOrder``. Numbers compare by JSON type and value (1 is
not 1.0, as Jackson's equality has it). Texts of the answers have the suffix taken out.
A case's ``outputs`` (records on topics) are compared as ``ksql_conformance.py`` does.

Not runnable, counted apart: disabled cases, cases with input headers, and cases
checking the protobuf form of pull queries (``testPullWithProtoFormat``).

Usage: python bench/ksql_rest_conformance.py PATH [--tree DIR] [--ref REF] [--files GLOB]
[--case TEXT] [--jobs N] [--out DIR] [--rerun RESULTS] (``--rerun``: only the cases an
earlier run's results.jsonl failed, the summary of both). Prints a line per case, then
per file: cases matched / runnable and not runnable, and overall.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from ksql_conformance import (  # noqa: E402
    Harness,
    Result,
    created_names,
    created_topics,
    expand,
    rename,
    report,
    unsuffixed,
)
from ksql_conformance_formats import with_schema_ids  # noqa: E402

TREE = "ksqldb-functional-tests/src/test/resources/rest-query-validation-tests"
QUERY_TIMEOUT_S = 30.0  # a query's answer: no byte for this long ends it
PUSH_START_S = 1.0  # after the server lists the push query, before inputs are written
MEDIA_TYPE = "application/vnd.ksql.v1+json"
# ksqlDB's RQTT server's settings (RestQueryTranslationTest) Strom's does not default to,
# sent with every request (a case's properties win)
SERVER_SETTINGS = {"ksql.query.push.v2.enabled": "true"}


def without_comments(text: str) -> str:
    """JSON text without ``//`` and ``/* */`` comments outside its strings."""
    out: list[str] = []
    i = 0
    in_string = False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def load_files(
    path: Path, tree: str, pattern: str, ref: str = "v0.29.0"
) -> dict[str, list[dict[str, Any]]]:
    """The case files' tests by file name (without .json); from a git dir, at ``ref``."""
    import fnmatch

    texts: dict[str, str] = {}
    if (path / "HEAD").exists() and (path / "objects").is_dir():
        names = subprocess.run(
            ["git", "-C", str(path), "ls-tree", "-r", "--name-only", ref, tree + "/"],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        for name in names:
            if name.endswith(".json") and fnmatch.fnmatch(Path(name).name, pattern):
                texts[Path(name).stem] = subprocess.run(
                    ["git", "-C", str(path), "show", f"{ref}:{name}"],
                    check=True, capture_output=True, text=True,
                ).stdout  # fmt: skip
    else:
        for file in sorted(path.glob("*.json")):
            if fnmatch.fnmatch(file.name, pattern):
                texts[file.stem] = file.read_text()
    return {
        name: json.loads(without_comments(text)).get("tests", [])
        for name, text in sorted(texts.items())
    }


def not_runnable(case: dict[str, Any]) -> str | None:
    if case.get("enabled") is False:
        return "disabled"
    if any("headers" in record for record in case.get("inputs", [])):
        return "input headers"
    if case.get("testPullWithProtoFormat"):
        return "protobuf form of pull queries"
    return None


def split(statements: list[str]) -> tuple[list[str], list[str]]:
    """The admin statements and the queries (from the first starting ``SELECT ``)."""
    first = next((i for i, s in enumerate(statements) if s.startswith("SELECT ")), None)
    if first is None:
        return statements, []
    return statements[:first], statements[first:]


# ---------------------------------------------------------------- comparing


def same_json(expected: Any, actual: Any) -> bool:
    """Jackson's equality of JSON values: numbers of the same kind (integral or not)
    and value, objects and arrays element by element."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            same_json(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            same_json(a, b) for a, b in zip(expected, actual, strict=True)
        )
    return bool(expected == actual)


def frozen(value: Any) -> str:
    """A key for a multiset of JSON values (1 and 1.0 apart)."""
    return json.dumps(value, sort_keys=True)


class Mismatch(Exception):
    """A response differs from the expected one."""


def match_fields(
    actual: Any,
    expected: dict[str, Any],
    statement: str,
    path: str,
    rows: tuple[Counter[str], Counter[str]] | None,
) -> None:
    """ksqlDB's ``matchResponseFields``: each expected field in the actual object; with
    ``rows`` (query rows, order not verified) a row's ``columns`` counted there instead."""
    if not isinstance(actual, dict):
        raise Mismatch(f"{path}: expected an object, got {json.dumps(actual)}")
    for key, value in expected.items():
        name, _, operator = key.partition("|")
        if isinstance(value, str):
            value = value.replace("{STATEMENT}", statement)
        if name not in actual:
            raise Mismatch(f"{path}: no {name} in {json.dumps(actual)[:300]}")
        got = actual[name]
        where = f"{path}->{name}"
        if isinstance(value, dict):
            match_fields(got, value, statement, where, rows)
        elif operator.upper() == "STARTS_WITH":
            if not isinstance(got, str) or not got.startswith(str(value)):
                raise Mismatch(f"{where}: expected a start {value!r}, got {got!r}")
        elif rows is not None and "row" in where and name.lower() == "columns":
            rows[0][frozen(got)] += 1
            rows[1][frozen(value)] += 1
        elif not same_json(value, got):
            raise Mismatch(f"{where}: expected {json.dumps(value)}, got {json.dumps(got)}")


def verify(
    actual: list[tuple[str, Any]],
    expected: list[dict[str, Any]],
    statements: list[str],
    verify_order: bool,
) -> None:
    """ksqlDB's ``verifyResponses``: at least as many responses as expected, each of
    the expected kind and content."""
    expected = [e for e in expected if "queryProto" not in e]
    if len(actual) < len(expected):
        raise Mismatch(f"responses: {len(actual)}, {len(expected)} expected")
    for index, wanted in enumerate(expected):
        kind, payload = next(iter(wanted.items()))
        got_kind, got = actual[index]
        statement = statements[index] if index < len(statements) else ""
        if kind != got_kind:
            raise Mismatch(f"responses[{index}]: a {got_kind} response, {kind} expected")
        if kind == "admin":
            match_fields(got, payload, statement, f"responses[{index}]->admin", None)
            continue
        if len(got) != len(payload):
            raise Mismatch(
                f"responses[{index}]: {len(got)} rows, {len(payload)} expected; got "
                + " ".join(json.dumps(r) for r in got)[:1500]
            )
        counts: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
        for i, (row, want) in enumerate(zip(got, payload, strict=True)):
            where = f"responses[{index}]->query[{i}]"
            match_fields(row, want, statement, where, None if verify_order else counts)
        if counts[0] != counts[1]:
            raise Mismatch(
                f"responses[{index}]: rows {sorted((counts[0] - counts[1]).elements())} "
                f"not expected; {sorted((counts[1] - counts[0]).elements())} missing"
            )


def error_matches(expected: dict[str, Any], status: int, body: dict[str, Any]) -> str | None:
    """Why an error answer is not the expected error (None: it is)."""
    if "status" in expected and int(expected["status"]) != status:
        return f"status {status}, {expected['status']} expected: {body.get('message')}"
    message = str(body.get("message", ""))
    if "message" in expected and str(expected["message"]) not in message:
        return f"message {message!r}, expected {expected['message']!r}"
    kind = str(expected.get("type", ""))
    if kind.endswith(".KsqlStatementErrorMessage") and body.get("@type") != "statement_error":
        return f"a {body.get('@type')}, a statement_error expected"
    return None


def deep_unsuffixed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: deep_unsuffixed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_unsuffixed(v) for v in value]
    return unsuffixed(value)


# ---------------------------------------------------------------- the harness


class RestHarness(Harness):
    """``ksql_conformance.Harness`` running a REST case instead of a QTT one."""

    def _run(self, case: dict[str, Any], suffix: str, result: Result) -> None:
        statements = case["statements"]
        names = created_names(statements)
        renamed = [rename(s, names, suffix) for s in statements]
        props = {**SERVER_SETTINGS, **{k: str(v) for k, v in case.get("properties", {}).items()}}
        if not any(k.endswith("auto.offset.reset") for k in props):
            props["ksql.streams.auto.offset.reset"] = "earliest"
        self._make_topics(case, statements, renamed, suffix)
        admin, queries = split(statements)
        admin_renamed = renamed[: len(admin)]
        expected_error = case.get("expectedError")
        responses: list[tuple[str, Any]] = []
        if admin:
            ids = self.codec.register_topics(case, suffix)
            text = "\n".join(with_schema_ids(s, ids) for s in admin_renamed)
            status, body = self._post("/ksql", {"ksql": text, "streamsProperties": props})
            if status != 200:
                self._judge_error(expected_error, status, body, result)
                return
            responses += [("admin", deep_unsuffixed(e)) for e in body]
        waits = bool((case.get("inputConditions") or {}).get("waitForActivePushQuery"))
        if not waits:
            self._produce_inputs(case, suffix, names, statements)
        if expected_error is None and len(case.get("responses", [])) > len(admin):
            self.settle(suffix)
        for original, statement in zip(queries, renamed[len(admin) :], strict=True):
            body_in = {"ksql": statement, "streamsProperties": props}
            feed = (lambda: self._feed_push(case, suffix, names, statements)) if waits else None
            waits = False
            status, rows = self._query(body_in, feed)
            if status != 200:
                if expected_error is None:
                    result.reason = "query failed"
                    result.diff += [f"statement: {original}", f"error: {rows}"]
                    return
                self._judge_error(expected_error, status, rows, result)
                if not result.ok:
                    return
                continue
            responses.append(("query", deep_unsuffixed(rows)))
        if expected_error is not None and any(k == "query" for k, _ in responses):
            result.reason = "no error"
            result.diff.append(f"expected error: {json.dumps(expected_error)}")
            return
        verify_order = bool((case.get("outputConditions") or {}).get("verifyOrder"))
        shown = [unsuffixed(s) for s in renamed]
        try:
            verify(responses, case.get("responses", []), shown, verify_order)
        except Mismatch as exc:
            result.ok = False
            result.reason = _reason(str(exc))
            result.diff.append(str(exc))
            return
        if case.get("outputs"):
            sources = self.sources(names, suffix)
            self.compare(case["outputs"], suffix, sources, result)
            return
        result.ok = True

    def _judge_error(
        self, expected: dict[str, Any] | None, status: int, body: Any, result: Result
    ) -> None:
        body = deep_unsuffixed(body) if isinstance(body, dict) else {"message": str(body)}
        if expected is None:
            result.ok = False
            result.reason = "statement failed"
            result.diff.append(f"error {status}: {body.get('message')}")
            return
        problem = error_matches(expected, status, body)
        result.ok = problem is None
        if problem is not None:
            result.reason = "other error"
            result.diff += [f"expected: {json.dumps(expected)}", f"actual: {problem}"]

    def _make_topics(
        self, case: dict[str, Any], statements: list[str], renamed: list[str], suffix: str
    ) -> None:
        """The case's topics, and those its CREATE statements read without making them
        (one partition, or the partitions the case gives)."""
        topics: dict[str, int] = {
            t["name"] + suffix: int(t.get("partitions", 1) or 1) for t in case.get("topics", [])
        }
        # ksqlDB's test driver makes a CREATE's topic the case does not list with 4
        # partitions; here 1 (the records' order kept), but 4 in a case that joins and
        # lists a topic of more than one, as a join needs sources of one count
        joins = any(re.search(r"\bJOIN\b", s, re.IGNORECASE) for s in statements)
        inferred = 4 if joins and any(count > 1 for count in topics.values()) else 1
        made = created_topics(renamed, topics, inferred)
        for record in case.get("inputs", []):
            if record["topic"] + suffix not in made:
                topics.setdefault(record["topic"] + suffix, 1)
        if not topics:
            return
        futures = self.admin.create_topics(
            [NewTopic(t, p, 1) for t, p in topics.items()], operation_timeout=30
        )
        for future in futures.values():
            try:
                future.result(60)
            except KafkaException:
                pass  # there already

    def _feed_push(
        self, case: dict[str, Any], suffix: str, names: set[str], statements: list[str]
    ) -> None:
        """The inputs of a case whose push query waits for them: once the server lists
        a push query (the harness's only running one of the case), a second later."""
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            ok, answer = self.ksql("SHOW QUERIES;", {})
            running = [
                q
                for entity in (answer if ok else [])
                for q in entity.get("queries", [])
                if str(q.get("queryType", "")).upper() == "PUSH"
                or "TRANSIENT" in str(q.get("id", "")).upper()
                or "SCALABLE" in str(q.get("id", "")).upper()
            ]
            if running:
                break
            time.sleep(0.1)
        time.sleep(PUSH_START_S)
        self._produce_inputs(case, suffix, names, statements)

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.server.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {"message": text.decode(errors="replace")}

    def _query(self, body: dict[str, Any], feed: Any) -> tuple[int, Any]:
        """A query's answer on ``/query``: its rows (the JSON array's objects), or the
        error; ``feed`` is called on a thread once the header has come."""
        request = urllib.request.Request(
            self.server.url + "/query",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": MEDIA_TYPE, "Accept": MEDIA_TYPE},
        )
        feeder: threading.Thread | None = None
        try:
            with urllib.request.urlopen(request, timeout=QUERY_TIMEOUT_S) as response:
                chunks: list[bytes] = []
                try:
                    while True:
                        line = response.readline()
                        if not line:
                            break
                        chunks.append(line)
                        if feed is not None and b"header" in line and feeder is None:
                            feeder = threading.Thread(target=feed, daemon=True)
                            feeder.start()
                except TimeoutError:
                    chunks.append(b'{"harness": "no more rows within the timeout"}]')
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {"message": text.decode(errors="replace")}
        finally:
            if feeder is not None:
                feeder.join(120)
        text = b"".join(chunks).decode().strip()
        try:
            rows = json.loads(text)
        except ValueError:
            rows = json.loads(re.sub(r",\s*\]$", "]", text) if text.endswith("]") else text + "]")
        return 200, rows if isinstance(rows, list) else [rows]


def _reason(problem: str) -> str:
    """A short reason of a mismatch, for the summary."""
    found = re.search(r"->(header->\w+|finalMessage|row|admin->[@\w]+)", problem)
    if "rows" in problem and "expected;" in problem or " rows, " in problem:
        return "rows"
    return found.group(1) if found else problem.split(":")[0]


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("path", type=Path, help="a directory of .json files or ksqlDB's git dir")
    parser.add_argument("--tree", default=TREE, help="the cases' path inside a git dir")
    parser.add_argument("--ref", default="v0.29.0", help="the git dir's tag or commit to read")
    parser.add_argument("--files", default="*.json", help="file names to run (a glob)")
    parser.add_argument("--case", default="", help="only cases whose name holds this")
    parser.add_argument("--jobs", type=int, default=3, help="cases run at a time")
    parser.add_argument("--out", type=Path, help="a directory for per-case diff files")
    parser.add_argument(
        "--rerun",
        type=Path,
        help="a results.jsonl of an earlier run (--out): run only the cases it failed, and "
        "print the summary of both (this run's result of a case replacing the earlier's)",
    )
    args = parser.parse_args()
    earlier: dict[tuple[str, str], Result] = {}
    if args.rerun is not None:
        for line in args.rerun.read_text().splitlines():
            row = json.loads(line)
            earlier[(row["family"], row["name"])] = Result(**row)
    # Ctrl-C (SIGINT) stops the run even when started in the background, which ignores it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    planned: list[tuple[str, dict[str, Any]]] = []
    results: list[Result] = []
    for family, tests in load_files(args.path, args.tree, args.files, args.ref).items():
        for test in tests:
            for case in expand(test):
                if args.case.lower() not in case["name"].lower():
                    continue
                reason = not_runnable(case)
                before = earlier.get((family, case["name"]))
                if reason:
                    results.append(Result(family, case["name"], "skip", reason=reason))
                elif before is not None and before.ok:
                    results.append(before)
                else:
                    planned.append((family, case))
    print(f"{len(planned)} cases to run, {len(results)} not runnable", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ksql-rest-conformance-") as work:
        harness = RestHarness(Path(work), args.jobs)
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


def summary(results: list[Result]) -> None:
    by_file: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_file[result.family].append(result)
    print("\nfile: cases matched/runnable, not runnable")
    for family, items in sorted(by_file.items()):
        run = [r for r in items if r.kind != "skip"]
        print(f"  {family}: {sum(r.ok for r in run)}/{len(run)}, {len(items) - len(run)}")
    run = [r for r in results if r.kind != "skip"]
    matched = sum(r.ok for r in run)
    share = 100 * matched / max(len(run), 1)
    print(f"\noverall: {matched}/{len(run)} runnable cases matched ({share:.0f}%)")
    skipped = Counter(r.reason for r in results if r.kind == "skip")
    print("not runnable: " + ", ".join(f"{n} {why}" for why, n in skipped.most_common()))
    failures = Counter(r.reason for r in run if not r.ok)
    print("failures: " + ", ".join(f"{n} {why}" for why, n in failures.most_common()))


if __name__ == "__main__":
    main()
