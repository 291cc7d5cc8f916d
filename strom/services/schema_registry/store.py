"""The registry's state, sans-I/O: what the records of ``_schemas`` say, and the records
a change writes.

Owns Confluent's key and value format for ``_schemas`` (a compacted topic, so keys are
written with one fixed field order): SCHEMA (a subject's version: id, type, text,
references, soft ``deleted``; a null value deletes it for good), CONFIG (a subject's or
the global compatibility level), MODE (READWRITE, READONLY, IMPORT), DELETE_SUBJECT
(every version up to one soft-deleted), NOOP (ignored). ``apply`` replays one record;
the ``RegistryState`` it builds answers every read of the REST API, and the
``plan_*`` methods check a change and give the records that make it, which the caller
writes and waits to see applied (so every instance reading the topic agrees, and ids
are never reused: a new id is above every id the topic ever held in its context).

The log decides who holds an id, not which instance wrote: the first SCHEMA record in
the partition's order to give an id to a schema, or a subject's version to an id, holds
it, and ``apply`` ignores a later record claiming either for something else (False), so
two writers planning from the same state cannot make one id name two schemas for any
reader. The writer of the ignored record plans again (``log``) and writes the key's
``restatement``.

Contexts, as Confluent's: a qualified subject ``:.name:subject`` lives in the context
``.name``, any other in the default context ``.``; each context has its own schema ids
(the same id may name different schemas in two contexts), so schemas are kept by
(context, id).

Does not own Kafka I/O (``log``) or HTTP (``app``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from strom.services.schema_registry.schemas import (
    AVRO,
    InvalidSchema,
    ParsedSchema,
    Reference,
    incompatibilities,
    parse,
)

DEFAULT_LEVEL = "BACKWARD"
DEFAULT_CONTEXT = "."


def context_of(subject: str | None) -> str:
    """The context of a subject: ``.name`` for ``:.name:subject``, else ``.``."""
    if subject and subject.startswith(":.") and subject.find(":", 2) > 0:
        return subject[1 : subject.find(":", 2)]
    return DEFAULT_CONTEXT


MODES = ("READWRITE", "READONLY", "IMPORT")


class RegistryError(Exception):
    """An answer in Confluent's error format: HTTP status, error code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found() -> RegistryError:
    return RegistryError(404, 40403, "Schema not found")


@dataclass
class StoredSchema:
    schema_id: int
    schema_type: str
    text: str
    references: list[Reference] = field(default_factory=list)


@dataclass
class SubjectVersion:
    version: int
    schema_id: int
    deleted: bool = False


Record = tuple[bytes, bytes | None]


def _key(**fields: Any) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _key(keytype="SCHEMA", subject=subject, version=version, magic=1)


def schema_value(
    subject: str, version: int, schema_id: int, schema: StoredSchema | ParsedSchema,
    deleted: bool = False,
) -> bytes:  # fmt: skip
    """The value of a SCHEMA record: ``subject``'s ``version`` is ``schema`` under
    ``schema_id``."""
    value: dict[str, Any] = {
        "subject": subject,
        "version": version,
        "id": schema_id,
        "schema": schema.text,
        "deleted": deleted,
    }
    if schema.schema_type != AVRO:
        value["schemaType"] = schema.schema_type
    if schema.references:
        value["references"] = [
            {"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references
        ]
    return json.dumps(value).encode()


def config_key(subject: str | None) -> bytes:
    return _key(keytype="CONFIG", subject=subject, magic=0)


def mode_key(subject: str | None) -> bytes:
    return _key(keytype="MODE", subject=subject, magic=0)


class RegistryState:
    def __init__(self) -> None:
        self.schemas: dict[tuple[str, int], StoredSchema] = {}  # by (context, id)
        self.subjects: dict[str, dict[int, SubjectVersion]] = {}
        self.configs: dict[str | None, str] = {}
        self.normalize: dict[str | None, bool] = {}  # subjects (None: global) that set it
        self.modes: dict[str | None, str] = {}
        self.max_ids: dict[str, int] = {}  # by context
        self._parsed: dict[tuple[str, int], ParsedSchema] = {}

    # Replay ---------------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """One record of ``_schemas``; records that do not parse are skipped. False when
        the record is a claim that lost (``_claim``) and is ignored."""
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value else None
        except ValueError:
            return True
        if not isinstance(k, dict):
            return True
        kind = k.get("keytype")
        subject = k.get("subject")
        if kind == "SCHEMA" and isinstance(subject, str):
            version = int(k.get("version", 0))
            if v is not None:
                return self._claim(subject, version, v)
            versions = self.subjects.get(subject, {})
            versions.pop(version, None)
            if not versions:
                self.subjects.pop(subject, None)
        elif kind == "CONFIG":
            self.configs.pop(subject, None)
            self.normalize.pop(subject, None)
            if v is not None:
                self.configs[subject] = v.get("compatibilityLevel", DEFAULT_LEVEL)
                if isinstance(v.get("normalize"), bool):
                    self.normalize[subject] = v["normalize"]
        elif kind == "MODE":
            if v is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = v.get("mode", "READWRITE")
        elif kind == "DELETE_SUBJECT" and isinstance(subject, str) and v is not None:
            for entry in self.subjects.get(subject, {}).values():
                if entry.version <= int(v.get("version", 0)):
                    entry.deleted = True
        return True

    def _claim(self, subject: str, version: int, value: Any) -> bool:
        """A SCHEMA record: ``subject``'s ``version`` is the schema ``value`` carries, under
        its id. The first record in the log's order to give an id to a schema, or a
        version to an id, holds it: a later record giving the id to another schema, or
        the version to another id, is ignored (False), so every reader of the one
        partition keeps the same schema under each id whatever several writers wrote
        (Confluent's readers also ignore a schema whose id is taken). The id is never
        handed out again either way."""
        try:
            schema_id = int(value["id"])
            claimed = StoredSchema(
                schema_id,
                value.get("schemaType") or AVRO,
                str(value["schema"]),
                [Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in
                 value.get("references") or []],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError):
            return True  # not a schema: skipped
        context = context_of(subject)
        self.max_ids[context] = max(self.max_ids.get(context, 0), schema_id)
        held = self.subjects.get(subject, {}).get(version)
        if held is not None and held.schema_id != schema_id:
            return False
        holder = self.schemas.get((context, schema_id))
        if holder is None:
            self.schemas[(context, schema_id)] = claimed
        elif not self._same_stored(subject, holder, claimed):
            return False
        deleted = bool(value.get("deleted"))
        self.subjects.setdefault(subject, {})[version] = SubjectVersion(version, schema_id, deleted)
        return True

    def _same_stored(self, subject: str, holder: StoredSchema, claimed: StoredSchema) -> bool:
        """Whether ``claimed`` is the schema ``holder`` is: the same text, or the same
        canonical form (one schema registered under two subjects in two layouts)."""
        if claimed == holder:
            return True
        try:
            references = claimed.references
            parsed = parse(claimed.schema_type, claimed.text, references, self.resolve(references))
        except (InvalidSchema, RegistryError):
            return False
        return self._same(subject, holder.schema_id, parsed)

    # Reads ----------------------------------------------------------------------------

    def contexts(self) -> list[str]:
        return sorted({DEFAULT_CONTEXT} | {context for context, _ in self.schemas})

    def stored(self, subject: str | None, schema_id: int) -> StoredSchema | None:
        """The schema with ``schema_id`` in the context of ``subject``."""
        return self.schemas.get((context_of(subject), schema_id))

    def parsed(self, subject: str | None, schema_id: int) -> ParsedSchema:
        """The parsed schema with ``schema_id`` in the context of ``subject``."""
        key = (context_of(subject), schema_id)
        found = self._parsed.get(key)
        if found is None:
            stored = self.schemas[key]
            found = self._parsed[key] = parse(
                stored.schema_type, stored.text, stored.references, self.resolve(stored.references)
            )
        return found

    def resolve(self, references: list[Reference]) -> dict[str, str]:
        """Each reference's name to its schema text (42201 when one is unknown)."""
        out = {}
        for ref in references:
            entry = self.subjects.get(ref.subject, {}).get(ref.version)
            if entry is None:
                raise RegistryError(
                    422, 42201, f"Invalid schema: reference {ref.subject} v{ref.version} not found"
                )
            out[ref.name] = self.schemas[(context_of(ref.subject), entry.schema_id)].text
        return out

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(
            s for s, versions in self.subjects.items()
            if any(deleted or not v.deleted for v in versions.values())
        )  # fmt: skip

    def versions(self, subject: str, deleted: bool = False) -> list[SubjectVersion]:
        found = [v for v in self.subjects.get(subject, {}).values() if deleted or not v.deleted]
        if not found:
            raise subject_not_found(subject)
        return sorted(found, key=lambda v: v.version)

    def version(self, subject: str, version: str, deleted: bool = False) -> SubjectVersion:
        versions = self.versions(subject, deleted=True)
        live = [v for v in versions if deleted or not v.deleted]
        if version in ("latest", "-1"):
            if not live:
                raise subject_not_found(subject)
            return live[-1]
        try:
            number = int(version)
        except ValueError:
            raise RegistryError(
                422, 42202, f"The specified version '{version}' is not a valid version id. "
                "Allowed values are between [1, 2^31-1] and the string \"latest\""
            ) from None  # fmt: skip
        if number < 1:
            raise RegistryError(422, 42202, f"The specified version '{version}' is not valid")
        for entry in live:
            if entry.version == number:
                return entry
        raise version_not_found(number)

    def level(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_LEVEL)

    def normalizes(self, subject: str | None) -> bool:
        """Whether schemas registered or looked up under ``subject`` are normalised."""
        if subject is not None and subject in self.normalize:
            return self.normalize[subject]
        return self.normalize.get(None, False)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, "READWRITE")

    def find(
        self, subject: str, parsed: ParsedSchema, deleted: bool = False
    ) -> SubjectVersion | None:
        for entry in self.subjects.get(subject, {}).values():
            if (deleted or not entry.deleted) and self._same(subject, entry.schema_id, parsed):
                return entry
        return None

    def _same(self, subject: str, schema_id: int, parsed: ParsedSchema) -> bool:
        stored = self.stored(subject, schema_id)
        if stored is None:
            return False
        if stored.schema_type != parsed.schema_type or stored.references != parsed.references:
            return False
        try:
            return self.parsed(subject, schema_id).canonical == parsed.canonical
        except (InvalidSchema, RegistryError):
            return False

    # Changes --------------------------------------------------------------------------

    def check(self, subject: str, parsed: ParsedSchema) -> list[str]:
        earlier = [self.parsed(subject, v.schema_id)
                   for v in self.subjects.get(subject, {}).values() if not v.deleted]  # fmt: skip
        return incompatibilities(self.level(subject), parsed, earlier)

    def plan_register(
        self, subject: str, parsed: ParsedSchema, schema_id: int | None = None,
        version: int | None = None,
    ) -> tuple[int, list[Record]]:  # fmt: skip
        """(id, records) of registering ``parsed`` under ``subject``: the id it already
        has there (no records), or a new version after the compatibility check."""
        mode = self.mode(subject)
        if mode == "READONLY":
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
        existing = self.find(subject, parsed)
        if existing is not None and schema_id is None:
            return existing.schema_id, []
        problems = [] if mode == "IMPORT" else self.check(subject, parsed)
        if problems:
            raise RegistryError(
                409, 409, "Schema being registered is incompatible with an earlier schema for "
                f"subject \"{subject}\", details: [{'; '.join(problems)}]"
            )  # fmt: skip
        context = context_of(subject)
        if schema_id is None:
            same = (i for c, i in self.schemas if c == context and self._same(subject, i, parsed))
            schema_id = next(same, self.max_ids.get(context, 0) + 1)
        elif (context, schema_id) in self.schemas and not self._same(subject, schema_id, parsed):
            raise RegistryError(
                422, 42207, f"Overwrite new schema with id {schema_id} is not permitted."
            )
        versions = self.subjects.get(subject, {})
        number = version if version is not None else max(versions, default=0) + 1
        held = versions.get(number)
        if held is not None and held.schema_id != schema_id:
            raise RegistryError(
                422, 42207, f"Overwrite new schema with version {number} is not permitted."
            )
        record = (schema_key(subject, number), schema_value(subject, number, schema_id, parsed))
        return schema_id, [record]

    def plan_delete_version(
        self, subject: str, version: str, permanent: bool
    ) -> tuple[int, list[Record]]:
        entry = self.version(subject, version, deleted=permanent)
        if self.mode(subject) == "READONLY":
            raise RegistryError(422, 42205, f"Subject {subject} is in read-only mode")
        if permanent:
            if not entry.deleted:
                raise RegistryError(
                    404, 40407, f"Subject '{subject}' Version {entry.version} was not deleted "
                    "first before being permanently deleted"
                )  # fmt: skip
            return entry.version, [(schema_key(subject, entry.version), None)]
        stored = self.schemas[(context_of(subject), entry.schema_id)]
        value = schema_value(subject, entry.version, entry.schema_id, stored, deleted=True)
        return entry.version, [(schema_key(subject, entry.version), value)]

    def plan_delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], list[Record]]:
        versions = self.versions(subject, deleted=permanent)
        if permanent:
            if any(not v.deleted for v in versions):
                raise RegistryError(
                    404, 40405, f"Subject '{subject}' was not deleted first before being "
                    "permanently deleted"
                )  # fmt: skip
            return [v.version for v in versions], [
                (schema_key(subject, v.version), None) for v in versions
            ]
        latest = versions[-1].version
        key = _key(keytype="DELETE_SUBJECT", subject=subject, magic=0)
        value = json.dumps({"subject": subject, "version": latest}).encode()
        return [v.version for v in versions], [(key, value)]

    def restatement(self, key: bytes) -> Record:
        """The record under a SCHEMA ``key`` that says what readers hold there: the
        version as applied, or a tombstone when none is. Written after a claim under
        ``key`` lost, as Confluent's primary rolls back an ignored record, so that
        compaction, which keeps a key's last record, keeps what every reader decided."""
        fields = json.loads(key)
        subject, version = fields["subject"], int(fields["version"])
        held = self.subjects.get(subject, {}).get(version)
        if held is None:
            return key, None
        stored = self.schemas[(context_of(subject), held.schema_id)]
        return key, schema_value(subject, version, held.schema_id, stored, held.deleted)
