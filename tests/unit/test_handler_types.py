"""What the type checker cannot see of a handler's kio classes, checked from its source.

- The unions a handler names (``request: request_types.X``, ``-> response_types.X``) are
  those of the API its ``@handles(api_key, ...)`` registers it for, and hold every
  version of it that it serves and kio has.
- The fields it hands to ``framing.build`` (a superset of every version's, so untyped)
  are each a field of some version of the class it names.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import types
from pathlib import Path

import strom
from strom.broker.handler_tables import CONTROLLER_ROUTES, ROUTES, Route
from strom.protocol import request_types, response_types
from strom.protocol.legacy_versions import response_schema

_NAMED = re.compile(r"\b(req|resp)\.(\w+)")
_MODULES = {"req": request_types, "resp": response_types}
STROM = Path(strom.__file__).parent


def _members(alias: object) -> tuple[type, ...]:
    if isinstance(alias, types.UnionType):
        return tuple(alias.__args__)
    assert isinstance(alias, type), alias
    return (alias,)


def _mismatches(route: Route) -> list[str]:
    found = []
    handler = route.handler
    for where in ("request", "return"):
        for module_name, name in _NAMED.findall(str(handler.__annotations__.get(where, ""))):
            members = _members(getattr(_MODULES[module_name], name))
            keys = {int(m.__api_key__) for m in members}
            if keys != {route.api_key}:
                found.append(f"{handler.__name__} (key {route.api_key}) names {name} of {keys}")
            if module_name == "resp":
                kio_versions = {
                    version
                    for version in range(route.min_version, route.max_version + 1)
                    if response_schema(route.api_key, version).__module__.startswith("kio.")
                }
                missing = kio_versions - {int(m.__version__) for m in members}
                if missing:
                    found.append(f"{handler.__name__}: resp.{name} lacks {sorted(missing)}")
    return found


def test_a_handlers_unions_are_those_of_its_api() -> None:
    routes = [*ROUTES.values(), *CONTROLLER_ROUTES.values()]
    answered = [r for r in routes if "resp." in str(r.handler.__annotations__.get("return"))]
    assert answered  # the check below looks at something
    assert [m for route in routes for m in _mismatches(route)] == []


# The fields handed to framing.build, which the type checker cannot see (build takes a
# superset of every version's fields), checked here against kio's classes: in a handler
# module, `build(response_type, ...)` where `response_type: type[resp.X]` is annotated,
# and `build(t, ...)` where `t = nested(response_type, "Name")`, may name only fields some
# version of X (or of its class Name) has.

HANDLER_SOURCES = sorted(
    [
        *(STROM / "broker" / "handlers").rglob("*.py"),
        *(STROM / "broker" / "access").glob("*.py"),
        *(STROM / "controller").glob("*.py"),
    ]
)


def _known_fields(api: str, nested_name: str | None) -> set[str] | None:
    union = getattr(response_types, api, None)
    if union is None:
        return None
    found: set[str] = set()
    for member in _members(union):
        cls = (
            member
            if nested_name is None
            else getattr(sys.modules[member.__module__], nested_name, None)
        )
        if cls is not None:
            found |= {f.name for f in dataclasses.fields(cls)}
    return found or None


def _unknown_build_fields(source: str, where: str) -> tuple[int, list[str]]:
    """(how many build calls were checked, the fields no version has) in ``source``."""
    checked = 0
    unknown: list[str] = []
    tree = ast.parse(source)
    outermost = [
        node
        for top in tree.body
        for node in (top.body if isinstance(top, ast.ClassDef) else [top])
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for function in outermost:  # its inner functions are walked with it
        classes: dict[str, tuple[str, str | None]] = {}  # name -> (API, nested class)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and (m := re.fullmatch(r"type\[resp\.(\w+)\]", ast.unparse(node.annotation)))
            ):
                classes[node.target.id] = (m.group(1), None)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "nested"
                and isinstance(node.value.args[0], ast.Name)
                and node.value.args[0].id in classes
                and isinstance(node.value.args[1], ast.Constant)
            ):
                api = classes[node.value.args[0].id][0]
                classes[node.targets[0].id] = (api, str(node.value.args[1].value))
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "build"
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in classes
            ):
                continue
            api, nested_name = classes[node.args[0].id]
            fields = _known_fields(api, nested_name)
            if fields is None:
                continue
            checked += 1
            for keyword in node.keywords:
                if keyword.arg is not None and keyword.arg not in fields:
                    what = api if nested_name is None else f"{api}.{nested_name}"
                    unknown.append(f"{where}:{node.lineno}: {keyword.arg} is no field of {what}")
    return checked, unknown


def test_the_fields_handed_to_build_are_fields_of_some_version() -> None:
    checked = 0
    unknown: list[str] = []
    for path in HANDLER_SOURCES:
        counted, found = _unknown_build_fields(path.read_text(), str(path.relative_to(STROM)))
        checked += counted
        unknown += found
    assert checked > 100  # the check reaches the handlers' builds
    assert unknown == []


def test_a_misspelt_field_handed_to_build_is_found() -> None:
    source = (
        "def handle(ctx, request):\n"
        "    response_type: type[resp.EndTxn] = ctx.response_type\n"
        "    topic_type = nested(response_type, 'Nothing')\n"
        "    return build(response_type, throttle_time=0, eror_code=0)\n"
        "def handle_describe(ctx, request):\n"
        "    response_type: type[resp.DescribeProducers] = ctx.response_type\n"
        "    partition_type = nested(response_type, 'PartitionResponse')\n"
        "    return build(partition_type, partition_index=0, error_code=0, leader=1)\n"
    )
    assert _unknown_build_fields(source, "example") == (
        2,
        [
            "example:4: eror_code is no field of EndTxn",
            "example:8: leader is no field of DescribeProducers.PartitionResponse",
        ],
    )
