"""SCRAM credentials from the command line, as kafka-configs.sh and kafka-storage.sh take
them: ``SCRAM-SHA-512=[iterations=8192,password=alice-secret]``.

Owns reading those specs, ``strom configs --alter --entity-type users --entity-name alice
--add-config 'SCRAM-SHA-512=[password=...]'`` (and ``--delete-config SCRAM-SHA-512``),
sent as one AlterUserScramCredentials request with the client properties of
``--command-config`` (the client salts the password; the password itself never leaves
this process): through confluent-kafka to a broker, or with ``--bootstrap-controller``
salted here and sent to the active controller itself; and the salted credentials
``strom storage format --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'``
writes for the cluster's first start.
Quotas of the same users are ``client_quotas``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0 import request as alter_req
from kio.static.primitive import i8, i32

from strom.cli import wire
from strom.cli.common import ToolError, check_reachable, describe_error
from strom.cli.properties_file import ClusterAccess
from strom.cluster.records import UserScramCredentialRecord
from strom.protocol.errors import ErrorCode
from strom.security.sasl import SCRAM_MECHANISMS, new_credential

DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
REQUEST_TIMEOUT_S = 15.0
_CLIENT_MECHANISMS = {
    "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
    "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
}


class ScramSpecError(ValueError):
    """A SCRAM credential spec that cannot be read; the message is one line."""


def parse_fields(mechanism: str, text: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """``iterations=8192,password=secret`` (brackets already removed) as a dict."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in allowed:
            raise ScramSpecError(
                f"{mechanism}: expected {', '.join(f'{a}=...' for a in allowed)}, got {part!r}"
            )
        fields[key] = value.strip().strip('"')
    if not fields.get("password"):
        raise ScramSpecError(f"{mechanism}: password=... is required")
    if "iterations" in fields:
        try:
            int(fields["iterations"])
        except ValueError:
            raise ScramSpecError(f"{mechanism}: iterations must be a number") from None
    return fields


def _mechanism(name: str) -> str:
    upper = name.strip().upper()
    if upper not in SCRAM_MECHANISMS:
        raise ScramSpecError(f"unknown SCRAM mechanism {name!r} ({', '.join(SCRAM_MECHANISMS)})")
    return upper


def storage_credential(spec: str) -> UserScramCredentialRecord:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret]`` as the record of its salted
    credential."""
    mechanism, sep, rest = spec.partition("=")
    rest = rest.strip()
    if not sep or not (rest.startswith("[") and rest.endswith("]")):
        raise ScramSpecError(f"expected MECHANISM=[name=...,password=...], got {spec!r}")
    name = _mechanism(mechanism)
    fields = parse_fields(name, rest[1:-1], ("name", "password", "iterations"))
    if not fields.get("name"):
        raise ScramSpecError(f"{name}: name=... is required")
    scram = SCRAM_MECHANISMS[name]
    iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    if not scram.min_iterations <= iterations <= scram.max_iterations:
        raise ScramSpecError(
            f"{name}: iterations must be {scram.min_iterations}-{scram.max_iterations}"
        )
    credential = new_credential(scram, fields["password"], iterations)
    return UserScramCredentialRecord(
        name=fields["name"],
        mechanism=scram.kafka_type,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


def wanted(args: argparse.Namespace, adds: dict[str, str], deletes: list[str]) -> bool:
    """Whether a ``strom configs`` command changes SCRAM credentials."""
    return args.entity_type == "users" and any(
        key.upper() in SCRAM_MECHANISMS for key in [*adds, *deletes]
    )


def run(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    access: ClusterAccess,
    adds: dict[str, str],
    deletes: list[str],
) -> int:
    """``strom configs --alter --entity-type users`` with SCRAM-SHA-256/512 configs."""
    if not args.alter:
        parser.error("SCRAM credentials are changed with --alter")
    user = args.entity_name
    if not user:
        parser.error("--entity-name (the user) is required for SCRAM credentials")
    others = [k for k in [*adds, *deletes] if k.upper() not in SCRAM_MECHANISMS]
    if others:
        parser.error(f"change SCRAM credentials and {others[0]} in separate commands")
    upserts: list[tuple[str, str, int]] = []  # (mechanism, password, iterations)
    try:
        for key, value in adds.items():
            name = _mechanism(key)
            fields = parse_fields(name, value, ("password", "iterations"))
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
            upserts.append((name, fields["password"], iterations))
        removals = [_mechanism(key) for key in deletes]
    except ScramSpecError as exc:
        parser.error(str(exc))
    if access.controllers:
        _alter_at_controller(access, user, upserts, removals)
    else:
        _alter(access, user, upserts, removals)
    print(f"Completed updating config for user {user}.")
    return 0


def _alter(
    access: ClusterAccess, user: str, upserts: list[tuple[str, str, int]], removals: list[str]
) -> None:
    """Through confluent-kafka, which salts the passwords."""
    alterations: list[Any] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(_CLIENT_MECHANISMS[name], iterations), password.encode()
        )
        for name, password, iterations in upserts
    ] + [UserScramCredentialDeletion(user, _CLIENT_MECHANISMS[name]) for name in removals]
    admin = AdminClient(access.client_config())
    check_reachable(admin, access.bootstrap)
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=REQUEST_TIMEOUT_S)
    for future in futures.values():
        try:
            future.result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ToolError(f"cannot alter user {user!r}: {describe_error(exc)}") from None


def _alter_at_controller(
    access: ClusterAccess, user: str, upserts: list[tuple[str, str, int]], removals: list[str]
) -> None:
    """AlterUserScramCredentials sent to the active controller, salted here."""
    upsertions = []
    for name, password, iterations in upserts:
        mechanism = SCRAM_MECHANISMS[name]
        salt = os.urandom(SALT_BYTES)
        upsertions.append(
            alter_req.ScramCredentialUpsertion(
                name=user,
                mechanism=i8(mechanism.kafka_type),
                iterations=i32(iterations),
                salt=salt,
                salted_password=mechanism.salted_password(password, salt, iterations),
            )
        )
    request = alter_req.AlterUserScramCredentialsRequest(
        deletions=tuple(
            alter_req.ScramCredentialDeletion(
                name=user, mechanism=i8(SCRAM_MECHANISMS[name].kafka_type)
            )
            for name in removals
        ),
        upsertions=tuple(upsertions),
    )
    for result in access.send(request, f"alter user {user!r}").results:
        if result.error_code != ErrorCode.none:
            reason = wire.error_name(result.error_code)
            if result.error_message:
                reason += f": {result.error_message}"
            raise ToolError(f"cannot alter user {user!r}: {reason}")
