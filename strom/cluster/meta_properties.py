"""A node's identity on disk: ``meta.properties`` in every log directory, and formatting.

Owns the ``meta.properties`` file as Kafka's v1 format has it (``version=1``,
``cluster.id``, ``node.id``, ``directory.id``: a random id per directory), Kafka's
random UUIDs in their 22-character base64url form (``random_uuid``), formatting the
log directories and the metadata log directory (``format_dirs``, what
``strom storage format`` does), describing them (``describe_dirs``, for
``strom storage info``), and the start-up check ``ensure_formatted``: every formatted
directory agrees on cluster.id and node.id, unformatted ones are formatted.

Beside meta.properties the metadata log directory gets ``bootstrap.json``, Strom's own
small stand-in for Kafka's ``bootstrap.checkpoint``: the cluster id, the
metadata.version Strom formats with, when the directory was formatted, and for
``--standalone`` the initial voter set (this controller alone), and the SCRAM
credentials of ``--add-scram`` (salted), which the first active controller writes into the
metadata log. Kafka's file is a record-batch snapshot.

Files written before directory ids existed (Strom's earlier ``version=1``,
``cluster.id``, ``node.id``) are accepted and get a directory.id added; Kafka's v0 form
(``broker.id`` instead of ``node.id``) is read too.

Does not own what lives in the directories (``strom.storage``) or the metadata log
(``strom.storage.metadata_log``).
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from strom.cluster.records import UserScramCredentialRecord
from strom.config import BrokerConfig, ConfigError, parse_properties
from strom.storage.durable import write_atomically

META_PROPERTIES = "meta.properties"
BOOTSTRAP_FILE = "bootstrap.json"
METADATA_VERSION = "4.0-IV3"  # the metadata.version a Strom node formats with
RESERVED_UUIDS = 100  # Kafka reserves the ids (0, 0) .. (0, 99)


class MetaPropertiesError(ConfigError):
    """The log directories' meta.properties disagree with each other or the config.

    A ConfigError, so whoever reports config errors reports this one too (one line);
    the broker and ``strom storage format`` exit 1 on it, not 2."""


def uuid_to_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in base64url without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_string(text: str) -> uuid.UUID:
    """The inverse of ``uuid_to_string``; ValueError if ``text`` is not one."""
    if len(text) != 22:
        raise ValueError(f"a UUID in base64url is 22 characters, not {len(text)}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError):
        raise ValueError("not base64url") from None
    if len(raw) != 16 or uuid_to_string(uuid.UUID(bytes=raw)) != text:
        raise ValueError("not the base64url form of 16 bytes")
    return uuid.UUID(bytes=raw)


def random_uuid() -> str:
    """A random (v4) UUID as Kafka's Uuid.randomUuid gives it: never one of the reserved
    ids (all zero in the high half and below 100 in the low one) and, as Kafka does
    since KAFKA-20072, never one whose string holds a '-' (so none starts with one and
    a command line cannot take it for an option)."""
    while True:
        value = uuid.uuid4()
        text = uuid_to_string(value)
        if value.int < RESERVED_UUIDS or "-" in text:
            continue
        return text


def check_cluster_id(cluster_id: str) -> None:
    """What ``storage format -t`` accepts: a Kafka UUID string (ConfigError otherwise)."""
    try:
        value = uuid_from_string(cluster_id)
    except ValueError as exc:
        raise ConfigError(
            f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {exc}"
        ) from None
    if value.int < RESERVED_UUIDS:
        raise ConfigError(f"Cluster ID {cluster_id} is a reserved UUID")


@dataclass(frozen=True)
class MetaProperties:
    """The contents of one ``meta.properties``."""

    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = 1

    def to_text(self) -> str:
        lines = ["#", f"#Written by Strom {time.strftime('%a %b %d %H:%M:%S %Z %Y')}"]
        lines.append(f"cluster.id={self.cluster_id}")
        if self.directory_id is not None:
            lines.append(f"directory.id={self.directory_id}")
        lines.append(f"node.id={self.node_id}")
        lines.append(f"version={self.version}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str, path: Path | str = META_PROPERTIES) -> MetaProperties:
        try:
            props = parse_properties(text)
        except ConfigError as exc:
            raise MetaPropertiesError(f"Malformed {path}: {exc}") from None
        try:
            version = int(props.get("version", "-1"))
            if version == 0:
                node_text = props.get("broker.id") or props.get("node.id")
            elif version == 1:
                node_text = props.get("node.id")
            else:
                raise MetaPropertiesError(f"Unsupported version {version} in {path}")
            if node_text is None:
                raise MetaPropertiesError(f"No node.id in {path}")
            node_id = int(node_text)
        except ValueError as exc:
            raise MetaPropertiesError(f"Malformed {path}: {exc}") from None
        cluster_id = props.get("cluster.id")
        if not cluster_id:
            raise MetaPropertiesError(f"No cluster.id in {path}")
        return cls(cluster_id, node_id, props.get("directory.id") or None, version)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The meta.properties of ``directory``; None if it has none (not formatted)."""
    path = Path(directory) / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MetaPropertiesError(f"Cannot read {path}: {exc.strerror}") from None
    return MetaProperties.from_text(text, path)


def write_meta_properties(directory: Path, meta: MetaProperties) -> None:
    """Write ``directory/meta.properties`` atomically (creating the directory)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / META_PROPERTIES, meta.to_text().encode("utf-8"))


def node_dirs(config: BrokerConfig) -> list[Path]:
    """The node's log directories, then the metadata log directory if it is another."""
    dirs = list(config.log_dirs)
    metadata = config.metadata_log_dir
    if not any(_same(metadata, d) for d in dirs):
        dirs.append(metadata)
    return dirs


def _same(a: Path, b: Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


@dataclass(frozen=True)
class DirState:
    """One directory as ``strom storage info`` shows it."""

    path: Path
    is_metadata: bool
    meta: MetaProperties | None  # None: not formatted
    problem: str | None = None  # unreadable or malformed meta.properties


def describe_dirs(config: BrokerConfig) -> list[DirState]:
    """Every directory of the node with its meta.properties (or why it has none)."""
    out = []
    for directory in node_dirs(config):
        is_metadata = _same(directory, config.metadata_log_dir)
        try:
            out.append(DirState(directory, is_metadata, read_meta_properties(directory)))
        except MetaPropertiesError as exc:
            out.append(DirState(directory, is_metadata, None, str(exc)))
    return out


def _new_directory_id(taken: set[str]) -> str:
    while True:
        directory_id = random_uuid()
        if directory_id not in taken:
            taken.add(directory_id)
            return directory_id


@dataclass(frozen=True)
class FormatResult:
    path: Path
    meta: MetaProperties
    formatted: bool  # False: already formatted with the same cluster id, left alone


def format_dirs(
    config: BrokerConfig,
    cluster_id: str,
    *,
    ignore_formatted: bool = False,
    standalone: bool = False,
    scram_credentials: list[UserScramCredentialRecord] | None = None,
) -> list[FormatResult]:
    """Write meta.properties into every directory of the node (and bootstrap.json into
    the metadata log directory), as ``kafka-storage.sh format`` does.

    A directory formatted before is an error (MetaPropertiesError) unless
    ``ignore_formatted`` and it holds the same cluster id and node id, in which case it is
    left as it is. Nothing is written unless every directory can be.
    """
    check_cluster_id(cluster_id)
    if standalone:
        if not config.is_controller:
            raise ConfigError("--standalone formats a controller; process.roles has none")
        if config.quorum_voters:
            raise ConfigError(
                "--standalone is for a dynamic quorum; remove controller.quorum.voters "
                "(or format without --standalone)"
            )
    node_id = config.node_id
    plan: list[tuple[Path, MetaProperties | None]] = []
    taken: set[str] = set()
    for state in describe_dirs(config):
        if state.problem is not None:
            raise MetaPropertiesError(state.problem)
        meta = state.meta
        if meta is not None:
            if meta.cluster_id != cluster_id:
                raise MetaPropertiesError(
                    f"Log directory {state.path} is already formatted with cluster.id "
                    f"{meta.cluster_id}, not {cluster_id}"
                )
            if meta.node_id != node_id:
                raise MetaPropertiesError(
                    f"Log directory {state.path} is already formatted for node.id "
                    f"{meta.node_id}, not {node_id}"
                )
            if not ignore_formatted:
                raise MetaPropertiesError(
                    f"Log directory {state.path} is already formatted. Use --ignore-formatted "
                    "to ignore this directory and format the others."
                )
            if meta.directory_id:
                taken.add(meta.directory_id)
        plan.append((state.path, meta))
    results = []
    for path, meta in plan:
        if meta is not None:
            results.append(FormatResult(path, meta, False))
            continue
        new = MetaProperties(cluster_id, node_id, _new_directory_id(taken))
        write_meta_properties(path, new)
        results.append(FormatResult(path, new, True))
    metadata_dir = config.metadata_log_dir
    if standalone or scram_credentials or not (metadata_dir / BOOTSTRAP_FILE).exists():
        write_bootstrap(
            metadata_dir, cluster_id, [node_id] if standalone else None, scram_credentials
        )
    return results


def write_bootstrap(
    directory: Path,
    cluster_id: str,
    initial_voters: list[int] | None,
    scram_credentials: list[UserScramCredentialRecord] | None = None,
) -> None:
    """Strom's ``bootstrap.json`` (see the module docstring)."""
    data: dict[str, object] = {
        "version": 1,
        "cluster.id": cluster_id,
        "metadata.version": METADATA_VERSION,
        "formatted.ms": int(time.time() * 1000),
        "initial.voters": initial_voters,
    }
    if scram_credentials:
        data["scram.credentials"] = [
            {
                "name": r.name,
                "mechanism": r.mechanism,
                "salt": base64.b64encode(r.salt).decode(),
                "stored.key": base64.b64encode(r.stored_key).decode(),
                "server.key": base64.b64encode(r.server_key).decode(),
                "iterations": r.iterations,
            }
            for r in scram_credentials
        ]
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / BOOTSTRAP_FILE, (json.dumps(data, indent=1) + "\n").encode())


def read_bootstrap(directory: Path) -> dict[str, object] | None:
    """The metadata log directory's ``bootstrap.json``; None if missing or unreadable."""
    try:
        data = json.loads((Path(directory) / BOOTSTRAP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def bootstrap_scram_records(directory: Path) -> list[UserScramCredentialRecord]:
    """The SCRAM credentials ``bootstrap.json`` holds, as metadata records."""
    data = read_bootstrap(directory) or {}
    entries = data.get("scram.credentials") or []
    records = []
    for entry in entries if isinstance(entries, list) else []:
        records.append(
            UserScramCredentialRecord(
                name=entry["name"],
                mechanism=entry["mechanism"],
                salt=base64.b64decode(entry["salt"]),
                stored_key=base64.b64decode(entry["stored.key"]),
                server_key=base64.b64decode(entry["server.key"]),
                iterations=entry["iterations"],
            )
        )
    return records


def ensure_formatted(
    config: BrokerConfig, cluster_id: str | None, *, new_cluster_id: str | None = None
) -> MetaProperties:
    """Check, or create, the node's meta.properties at start-up; returns the metadata
    log directory's.

    Every formatted directory must hold the same cluster.id (and ``cluster_id``, when
    given) and the configured node.id, else MetaPropertiesError in one line. Directories
    not yet formatted are formatted with that cluster id (``cluster_id``, else the one
    the others hold, else ``new_cluster_id``, else a new random one); a file without
    directory.id gets one.
    """
    if cluster_id is not None and (not cluster_id.strip() or any(c in cluster_id for c in "\n=")):
        raise ConfigError(f"Invalid value {cluster_id!r} for configuration cluster.id")
    node_id = config.node_id
    states = describe_dirs(config)
    expected = cluster_id
    for state in states:
        if state.problem is not None:
            raise MetaPropertiesError(state.problem)
        meta = state.meta
        if meta is None:
            continue
        path = state.path / META_PROPERTIES
        if expected is None:
            expected = meta.cluster_id
        elif meta.cluster_id != expected:
            raise MetaPropertiesError(
                f"Invalid cluster.id in: {path}. Expected {expected}, but read {meta.cluster_id}"
            )
        if meta.node_id != node_id:
            raise MetaPropertiesError(
                f"Stored node id {meta.node_id} doesn't match the configured node.id {node_id} "
                f"in {path}. If you moved your data, make sure the configured node id "
                "matches; to create a new node, remove the data in its directories."
            )
    cluster = expected or new_cluster_id or random_uuid()
    taken = {s.meta.directory_id for s in states if s.meta is not None and s.meta.directory_id}
    result: MetaProperties | None = None
    for state in states:
        meta = state.meta
        if meta is None:
            meta = MetaProperties(cluster, node_id, _new_directory_id(taken))
            write_meta_properties(state.path, meta)
        elif meta.directory_id is None or meta.version != 1:
            directory_id = meta.directory_id or _new_directory_id(taken)
            meta = replace(meta, directory_id=directory_id, version=1)
            write_meta_properties(state.path, meta)
        if state.is_metadata:
            result = meta
    metadata_dir = config.metadata_log_dir
    if not (metadata_dir / BOOTSTRAP_FILE).exists():
        write_bootstrap(metadata_dir, cluster, None)
    assert result is not None
    return result
