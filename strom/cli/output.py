"""How the tools print what they list: rich tables, tab-separated lines or JSON.

Owns the ``--output`` option and the rendering of every listing a tool prints.
With no ``--output`` a tool prints rich tables when stdout is a terminal and plain
tab-separated lines when it is a pipe or a file (one header line, then one line per
row; a tab or newline inside a cell becomes a space), so ``cut``, ``awk`` and
``grep`` work on it. ``--output json`` prints one JSON array of objects, one object
per row of every listing the command printed, with snake_case keys taken from the
column names and the listing's context (the topic of a partition row, the cluster
id of a broker row...) merged in; numeric columns become numbers (``-`` and
``None`` become null). Free text lines (``note``) are left out of JSON.
``topics --list`` and ``groups --list`` keep Kafka's one name a line unless
``--output`` is given, so ``strom topics --list | while read t`` stays as with Kafka.

A tool makes a ``Listing``, adds rows, and hands it to ``show``; ``flush`` (called
once by ``strom.cli.main`` after the tool returns) prints the collected JSON.
It knows nothing of Kafka: only columns, rows and the chosen form.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

TABLE = "table"
PLAIN = "plain"
JSON = "json"
FORMS = (TABLE, PLAIN, JSON)
_NULLS = {"-", "None", "", "null"}
_INT = re.compile(r"-?\d+\Z")
_COLLECTED = "_output_records"


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        choices=FORMS,
        default=None,
        help="table (default on a terminal), plain tab-separated lines (default in a pipe) "
        "or a JSON array of objects",
    )


def form_of(args: argparse.Namespace) -> str:
    """The chosen ``--output``, or table on a terminal and plain lines elsewhere."""
    chosen = getattr(args, "output", None)
    if isinstance(chosen, str) and chosen in FORMS:
        return chosen
    return TABLE if sys.stdout.isatty() else PLAIN


class Listing:
    """One table: column names, which of them are numbers, the rows as text cells."""

    def __init__(self, *columns: str, numeric: Iterable[str] = (), title: str | None = None):
        self.columns = list(columns)
        self.numeric = set(numeric)
        self.title = title
        self.rows: list[list[str]] = []

    def add_row(self, *cells: Any) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(["" if cell is None else str(cell) for cell in cells])


def json_key(column: str) -> str:
    """``CURRENT-OFFSET`` -> ``current_offset``, ``NodeId`` -> ``node_id``, ``#MEMBERS`` ->
    ``members``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", column)
    return re.sub(r"[^a-z0-9]+", "_", spaced.lower()).strip("_")


def json_value(text: str, numeric: bool) -> Any:
    if text in _NULLS and (numeric or text in ("None", "null")):
        return None
    if numeric and _INT.match(text):
        return int(text)
    return text


def records(listing: Listing, context: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The listing's rows as JSON objects, the context's fields first."""
    base = {json_key(key): value for key, value in (context or {}).items()}
    keys = [json_key(column) for column in listing.columns]
    return [
        {
            **base,
            **{
                key: json_value(cell, column in listing.numeric)
                for key, column, cell in zip(keys, listing.columns, row, strict=True)
            },
        }
        for row in listing.rows
    ]


def plain_lines(listing: Listing) -> list[str]:
    """The header line and one tab-separated line per row."""

    def clean(cell: str) -> str:
        return cell.replace("\t", " ").replace("\r", " ").replace("\n", " ")

    return ["\t".join(clean(c) for c in row) for row in [listing.columns, *listing.rows]]


def rich_table(listing: Listing) -> Table:
    table = Table(title=listing.title, title_justify="left")
    for column in listing.columns:
        justify: JustifyMethod = "right" if column in listing.numeric else "left"
        table.add_column(column, justify=justify, no_wrap=True)
    for row in listing.rows:
        # Cells as plain text: an id holding ``[...]`` is not markup.
        table.add_row(*(Text(cell) for cell in row))
    return table


def console() -> Console:
    # A terminal narrower than a row: never wrap a row, ids are long.
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 400)


def show(args: argparse.Namespace, listing: Listing, context: dict[str, Any] | None = None) -> None:
    """Print one listing in the chosen form (JSON: kept for ``flush``)."""
    form = form_of(args)
    if form == JSON:
        collected = getattr(args, _COLLECTED, None)
        if collected is None:
            collected = []
            setattr(args, _COLLECTED, collected)
        collected.extend(records(listing, context))
    elif form == PLAIN:
        if listing.title:
            print(listing.title)
        print("\n".join(plain_lines(listing)), flush=True)
    else:
        console().print(rich_table(listing))


def note(args: argparse.Namespace, text: str) -> None:
    """A line of text around the listings; left out of JSON."""
    if form_of(args) != JSON:
        print(text)


def wants_json(args: argparse.Namespace) -> bool:
    return form_of(args) == JSON


def emit_json(args: argparse.Namespace, objects: list[dict[str, Any]]) -> None:
    """Objects a tool built itself, added to the command's JSON array."""
    collected = getattr(args, _COLLECTED, None)
    if collected is None:
        collected = []
        setattr(args, _COLLECTED, collected)
    collected.extend(objects)


def flush(args: argparse.Namespace) -> None:
    """Print the JSON array collected while the command ran (``[]`` if it listed nothing)."""
    if form_of(args) == JSON and hasattr(args, "output"):
        print(json.dumps(getattr(args, _COLLECTED, []), indent=2))
