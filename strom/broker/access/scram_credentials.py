"""SCRAM credential administration: DescribeUserScramCredentials (50) v0 and
AlterUserScramCredentials (51) v0.

On the client listeners: Describe needs DESCRIBE on the cluster and is answered from this
node's metadata image (mechanisms and iterations, never salts or keys); every user with
a credential when the request names none, RESOURCE_NOT_FOUND for a named user without
one, DUPLICATE_RESOURCE for a user named twice. Alter needs ALTER on the cluster and is
forwarded to the active controller, then answered once this node's metadata shows the
change (bounded, as ACL changes are). The client sends the salt and the salted password,
never the password itself (KIP-554).

On the controller listener, once the sender may (CLUSTER_ACTION, a forwarding
broker's, or ALTER on the cluster; else CLUSTER_AUTHORIZATION_FAILED for every user):
Alter checks each user's changes (DUPLICATE_RESOURCE for a
user changed twice in one request, UNACCEPTABLE_CREDENTIAL for an empty name, too few or
too many iterations or an empty salt or salted password, UNSUPPORTED_SASL_MECHANISM,
RESOURCE_NOT_FOUND for deleting a credential that is not there) and writes a
UserScramCredentialRecord (salt, stored key, server key, iterations, as Kafka stores
them) or RemoveUserScramCredentialRecord for the users whose changes all pass.

Does not own the SCRAM exchange (``strom.security.sasl``) or its use (``authentication``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.alter_user_scram_credentials.v0.request import (
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.cluster.controller_api import ControllerError, ControllerResult
from strom.cluster.quorum_controller import QuorumController
from strom.cluster.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.security.authorizer import AclOperation
from strom.security.sasl import SCRAM_BY_TYPE, credential_from_salted

if TYPE_CHECKING:
    from strom.cluster.image import MetadataImage
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

FORWARD_WAIT_S = 5.0


def _mechanisms_of(image: Any, user: str) -> list[tuple[int, int]]:
    """(mechanism, iterations) of each credential the user has."""
    return sorted(
        (mechanism, record.iterations)
        for (name, mechanism), record in image.scram_credentials.items()
        if name == user
    )


@handles(50, 0, 0)
def handle_describe_user_scram_credentials(
    ctx: RequestContext, request: req.DescribeUserScramCredentials
) -> resp.DescribeUserScramCredentials:
    response_type: type[resp.DescribeUserScramCredentials] = ctx.response_type
    result_type = nested(response_type, "DescribeUserScramCredentialsResult")
    info_type = nested(response_type, "CredentialInfo")
    if not authz.cluster_allowed(ctx, AclOperation.DESCRIBE):
        # The error on the response and on each user asked about, as Kafka answers
        # (librdkafka crashes on a refusal without the users' results).
        code = ErrorCode.cluster_authorization_failed
        message: str | None = "Cluster authorization failed."
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            results=tuple(
                build(
                    result_type,
                    user=u.name,
                    error_code=code,
                    error_message=message,
                    credential_infos=(),
                )
                for u in request.users or ()
            ),
        )
    image = ctx.broker.state.image
    if request.users:
        names = [u.name for u in request.users]
    else:
        names = sorted({name for name, _ in image.scram_credentials})
    results = []
    seen: set[str] = set()
    for name in names:
        if names.count(name) > 1:
            if name in seen:
                continue
            seen.add(name)
            code, message, infos = (
                ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
                [],
            )
        else:
            infos = _mechanisms_of(image, name)
            code, message = ErrorCode.none, None
            if not infos:
                code = ErrorCode.resource_not_found
                message = "Attempt to describe a user credential that does not exist"
        results.append(
            build(
                result_type,
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=tuple(
                    build(info_type, mechanism=m, iterations=i) for m, i in infos
                ),
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


def _changes(
    request: req.AlterUserScramCredentials,
) -> list[ScramCredentialDeletion | ScramCredentialUpsertion]:
    return [*request.deletions, *request.upsertions]


def _users_of(request: req.AlterUserScramCredentials) -> list[str]:
    names: list[str] = []
    for change in _changes(request):
        if change.name not in names:
            names.append(change.name)
    return names


@handles(51, 0, 0)
async def handle_alter_user_scram_credentials(
    ctx: RequestContext, request: req.AlterUserScramCredentials
) -> resp.AlterUserScramCredentials:
    response_type: type[resp.AlterUserScramCredentials] = ctx.response_type
    result_type = nested(response_type, "AlterUserScramCredentialsResult")

    def every(code: ErrorCode, message: str) -> resp.AlterUserScramCredentials:
        results = tuple(
            build(result_type, user=name, error_code=code, error_message=message)
            for name in _users_of(request)
        )
        return build(response_type, throttle_time=NO_THROTTLE, results=results)

    if not authz.cluster_allowed(ctx, AclOperation.ALTER):
        return every(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    state = ctx.broker.state
    try:
        response: resp.AlterUserScramCredentials = await ctx.broker.controller_channel.forward(
            ctx, request
        )
    except ControllerUnavailable:
        return every(ErrorCode.request_timed_out, "No active controller answered in time.")
    done = {r.user for r in response.results if r.error_code == ErrorCode.none}

    def visible() -> bool:
        credentials = state.image.scram_credentials
        for deletion in request.deletions:
            if deletion.name in done and (deletion.name, deletion.mechanism) in credentials:
                return False
        for upsertion in request.upsertions:
            if upsertion.name in done:
                stored = credentials.get((upsertion.name, upsertion.mechanism))
                if stored is None or stored.salt != bytes(upsertion.salt):
                    return False
        return True

    await ctx.broker.wait_for_metadata(visible, FORWARD_WAIT_S)
    return response


def _problem(
    image: MetadataImage, request: req.AlterUserScramCredentials, name: str
) -> tuple[ErrorCode, str] | None:
    """Why the changes to one user's credentials cannot be made, if they cannot."""
    changes = [c for c in _changes(request) if c.name == name]
    if len({c.mechanism for c in changes}) != len(changes):
        return (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        )
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    for change in changes:
        mechanism = SCRAM_BY_TYPE.get(change.mechanism)
        if mechanism is None:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if isinstance(change, ScramCredentialUpsertion):
            if change.iterations < mechanism.min_iterations:
                return ErrorCode.unacceptable_credential, "Too few iterations"
            if change.iterations > mechanism.max_iterations:
                return ErrorCode.unacceptable_credential, "Too many iterations"
            if not change.salt or not change.salted_password:
                return ErrorCode.unacceptable_credential, "Salt and salted password are required"
        elif (name, change.mechanism) not in image.scram_credentials:
            return (
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
    return None


@handles_controller(51, 0, 0)
async def controller_alter_user_scram_credentials(
    ctx: RequestContext, request: req.AlterUserScramCredentials
) -> resp.AlterUserScramCredentials:
    response_type: type[resp.AlterUserScramCredentials] = ctx.response_type
    result_type = nested(response_type, "AlterUserScramCredentialsResult")
    names = _users_of(request)

    def decide(
        controller: QuorumController,
    ) -> ControllerResult[dict[str, tuple[ErrorCode, str | None]]]:
        image = controller.image
        outcome: dict[str, tuple[ErrorCode, str | None]] = {}
        records: list[MetadataRecord] = []
        for name in names:
            problem = _problem(image, request, name)
            outcome[name] = problem or (ErrorCode.none, None)
            if problem is not None:
                continue
            for deletion in request.deletions:
                if deletion.name == name:
                    records.append(
                        RemoveUserScramCredentialRecord(name=name, mechanism=deletion.mechanism)
                    )
            for upsertion in request.upsertions:
                if upsertion.name == name:
                    credential = credential_from_salted(
                        SCRAM_BY_TYPE[upsertion.mechanism],
                        bytes(upsertion.salted_password),
                        bytes(upsertion.salt),
                        upsertion.iterations,
                    )
                    records.append(
                        UserScramCredentialRecord(
                            name=name,
                            mechanism=upsertion.mechanism,
                            salt=credential.salt,
                            stored_key=credential.stored_key,
                            server_key=credential.server_key,
                            iterations=credential.iterations,
                        )
                    )
        result = controller.propose(records)
        return ControllerResult(result.records, outcome)

    try:
        if not authz.controller_admin_allowed(ctx, authz.Op.ALTER):
            raise ControllerError(
                ErrorCode.cluster_authorization_failed,
                f"{ctx.principal} may not ALTER the cluster (change SCRAM credentials)",
            )
        service = ctx.broker.controller_service
        if service is None or service.controller is None:
            raise ControllerError(
                ErrorCode.not_controller, "This node is not the active controller."
            )
        outcome = await service.run(decide)
    except ControllerError as exc:
        outcome = {name: (exc.code, str(exc)) for name in names}
    results = tuple(
        build(result_type, user=name, error_code=code, error_message=message)
        for name, (code, message) in outcome.items()
    )
    return build(response_type, throttle_time=NO_THROTTLE, results=results)
