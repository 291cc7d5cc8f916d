"""Schema registry contexts in the sans-I/O state: a qualified subject ``:.ctx:name``
gets ids of its context's own, the same id names different schemas in two contexts,
and references, lookups and deletes stay inside the subject's context."""

from __future__ import annotations

import json

from strom.services.schema_registry.schemas import Reference, parse
from strom.services.schema_registry.store import RegistryState, context_of


def avro(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]})


def register(state: RegistryState, subject: str, text: str, refs=None) -> int:
    refs = refs or []
    parsed = parse("AVRO", text, refs, state.resolve(refs))
    schema_id, records = state.plan_register(subject, parsed)
    for key, value in records:
        state.apply(key, value)
    return schema_id


def test_context_of_qualified_and_plain_subjects() -> None:
    assert context_of(":.staging:orders-value") == ".staging"
    assert context_of("orders-value") == "."
    assert context_of(":not-a-context") == "."
    assert context_of(None) == "."


def test_each_context_has_its_own_ids() -> None:
    state = RegistryState()
    first = register(state, "a-value", avro("A"))
    second = register(state, "b-value", avro("B"))
    staged = register(state, ":.staging:b-value", avro("B"))
    other = register(state, ":.staging:c-value", avro("C"))
    assert (first, second) == (1, 2)
    assert (staged, other) == (1, 2)  # ids start again in .staging
    assert state.contexts() == [".", ".staging"]
    assert json.loads(state.stored(":.staging:x", 1).text)["name"] == "B"
    assert json.loads(state.stored("x", 1).text)["name"] == "A"
    # The same schema in the same context keeps its id across subjects.
    assert register(state, ":.staging:d-value", avro("C")) == 2
    # A reference resolves in the referenced subject's context.
    referring = json.dumps({"type": "record", "name": "R", "fields": [{"name": "c", "type": "C"}]})
    ref = Reference("C", ":.staging:c-value", 1)
    assert register(state, ":.staging:r-value", referring, [ref]) == 3
    assert state.resolve([ref]) == {"C": avro("C")}
