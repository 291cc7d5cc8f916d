"""Which record of ``_schemas`` holds a schema id or a subject's version, in the sans-I/O
state: two writers that planned from the same state claim the same id (or version) for
different schemas; every reader keeps the first claim in the log's order and ignores
the later one, the id is never handed out again, and the key's restatement says what
the readers hold."""

from __future__ import annotations

import json

import pytest

from strom.services.schema_registry.schemas import parse
from strom.services.schema_registry.store import (
    Record,
    RegistryError,
    RegistryState,
    config_key,
    schema_key,
    schema_value,
)


def avro(name: str, layout: dict | None = None) -> str:
    schema = {"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]}
    return json.dumps(schema, **(layout or {}))


def planned(state: RegistryState, subject: str, text: str) -> tuple[int, Record]:
    schema_id, records = state.plan_register(subject, parse("AVRO", text))
    return schema_id, records[0]


def replay(records: list[Record]) -> tuple[RegistryState, list[bool]]:
    state = RegistryState()
    return state, [state.apply(key, value) for key, value in records]


def view(state: RegistryState) -> dict[str, dict[int, int]]:
    return {s: {v: e.schema_id for v, e in vs.items()} for s, vs in state.subjects.items()}


def test_the_first_claim_of_an_id_holds_and_a_later_one_is_ignored() -> None:
    base = RegistryState()
    a_id, a = planned(base, "a-value", avro("A"))
    b_id, b = planned(base, "b-value", avro("B"))  # planned from the same state
    assert a_id == b_id == 1
    state, held = replay([a, b])
    assert held == [True, False]
    assert view(state) == {"a-value": {1: 1}}
    assert json.loads(state.stored("a-value", 1).text)["name"] == "A"
    # The writer that lost plans again from what it read: the next id.
    retried_id, retried = planned(state, "b-value", avro("B"))
    assert retried_id == 2 and state.apply(*retried)
    assert view(state) == {"a-value": {1: 1}, "b-value": {1: 2}}


def test_the_first_claim_of_a_version_holds() -> None:
    base = RegistryState()
    level = (config_key("orders"), json.dumps({"compatibilityLevel": "NONE"}).encode())
    _, first = planned(base, "orders", avro("A"))
    base.apply(*level)
    base.apply(*first)
    # Two writers add version 2 with different schemas, under different ids (the
    # second had read further, up to id 4).
    x_id, x = planned(base, "orders", avro("X"))
    y_id = 5
    y = (schema_key("orders", 2), schema_value("orders", 2, y_id, parse("AVRO", avro("Y"))))
    state, held = replay([level, first, x, y])
    assert held == [True, True, True, False]
    assert view(state) == {"orders": {1: 1, 2: x_id}}
    # The losing id is never handed out again, though no reader serves it.
    assert planned(state, "other", avro("Z"))[0] > y_id
    # Restating the key writes the winner's record again: compaction keeps it.
    key, value = state.restatement(y[0])
    assert key == schema_key("orders", 2) and json.loads(value)["id"] == x_id
    assert state.apply(key, value) and view(state)["orders"][2] == x_id


def test_a_free_key_is_restated_as_a_tombstone() -> None:
    base = RegistryState()
    _, a = planned(base, "a-value", avro("A"))
    _, b = planned(base, "b-value", avro("B"))
    state, _ = replay([a, b])
    assert state.restatement(b[0]) == (b[0], None)


def test_the_same_schema_under_an_id_is_no_conflict() -> None:
    """The same schema claimed twice for one id (two subjects, another layout, a soft
    delete) holds each time."""
    base = RegistryState()
    _, a = planned(base, "a-value", avro("A"))
    _, again = planned(base, "c-value", avro("A", {"indent": 2}))
    state, held = replay([a, again])
    assert held == [True, True]
    assert view(state) == {"a-value": {1: 1}, "c-value": {1: 1}}
    _, records = state.plan_delete_version("a-value", "1", permanent=False)
    assert state.apply(*records[0]) and state.subjects["a-value"][1].deleted


def test_an_import_does_not_overwrite_a_version_held_by_another_id() -> None:
    state = RegistryState()
    state.apply(*planned(state, "orders", avro("A"))[1])
    state.apply(b'{"keytype":"MODE","subject":"orders","magic":0}', b'{"mode":"IMPORT"}')
    with pytest.raises(RegistryError) as refused:
        state.plan_register("orders", parse("AVRO", avro("B")), schema_id=7, version=1)
    assert refused.value.code == 42207
