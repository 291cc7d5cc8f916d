"""ACL administration: DescribeAcls (29) v0-3, CreateAcls (30) v0-3, DeleteAcls (31) v0-3.

DescribeAcls, on the client listeners and on the controller listener alike (as Kafka's
controllers serve it to ``kafka-acls.sh --bootstrap-controller``), needs DESCRIBE on the
cluster and is answered from this node's authorizer (the ACLs of its metadata image).
On the client listeners CreateAcls and DeleteAcls need ALTER on the cluster and are
forwarded as they came to the active controller, then answered once this node's
metadata shows the change (bounded, as topic changes are).
Without an authorizer configured every API answers SECURITY_DISABLED, as Kafka does.

On the controller listener, once the sender may (CLUSTER_ACTION, a forwarding
broker's, or ALTER on the cluster; else CLUSTER_AUTHORIZATION_FAILED for every
entry): CreateAcls validates each binding (INVALID_REQUEST for
unknown or ANY types, MATCH or ANY patterns, an empty name, a principal without a type,
a cluster not named kafka-cluster) and writes an AccessControlEntryRecord with a fresh
id for each binding not already stored (re-creating one is a success that writes
nothing); DeleteAcls writes a RemoveAccessControlEntryRecord for every stored binding a
filter matches and reports the matches per filter (a binding matched by two filters is
removed once and reported under both), as Kafka's AclControlManager does.

Version 0 of each has no pattern type: its bindings and filters are LITERAL, as Kafka
reads them (so a v0 filter never matches a PREFIXED binding).

Does not own the ACL semantics (``strom.security.authorizer``) or enforcement (``authz``).
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker.access import authz
from strom.broker.access.node_authorizer import binding_of
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.cluster.controller_api import ControllerError, ControllerResult
from strom.cluster.quorum_controller import QuorumController
from strom.cluster.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    InvalidAcl,
    PatternType,
)

FORWARD_WAIT_S = 5.0
SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"


def _filter(item: Any) -> AclBindingFilter:
    return AclBindingFilter(
        item.resource_type_filter,
        item.resource_name_filter,
        getattr(item, "pattern_type_filter", PatternType.LITERAL),  # v1+
        item.principal_filter,
        item.host_filter,
        item.operation,
        item.permission_type,
    )


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        creation.resource_type,
        creation.resource_name,
        getattr(creation, "resource_pattern_type", PatternType.LITERAL),  # v1+
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


def _image_bindings(image: Any) -> set[AclBinding]:
    return {binding_of(r) for r in image.acls.values()}


# Client listeners ----------------------------------------------------------------


# Any for request and answer: DescribeAcls v0 is built at run time (legacy_versions)
@handles_controller(29, 0, 3)
@handles(29, 0, 3)
def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    authorizer = authz.authorizer_of(ctx.broker)

    def failed(code: ErrorCode, message: str) -> Any:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            resources=(),
        )

    if authorizer is None:
        return failed(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)
    if not authz.cluster_allowed(ctx, AclOperation.DESCRIBE):
        return failed(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    acl_filter = _filter(request)
    if acl_filter.unknown_part() is not None:
        return failed(ErrorCode.invalid_request, str(acl_filter.unknown_part()))
    resource_type = nested(response_type, "DescribeAclsResource")
    description_type = nested(response_type, "AclDescription")
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in authorizer.describe(acl_filter):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        by_resource.setdefault(key, []).append(acl)
    resources = tuple(
        build(
            resource_type,
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                build(
                    description_type,
                    principal=a.principal,
                    host=a.host,
                    operation=a.operation,
                    permission_type=a.permission,
                )
                for a in sorted(by_resource[(rtype, name, pattern)], key=_order)
            ),
        )
        for rtype, name, pattern in sorted(by_resource)
    )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=resources,
    )


def _order(acl: AclBinding) -> tuple[str, str, int, int]:
    return (acl.principal, acl.host, acl.operation, acl.permission)


def _refusal(ctx: RequestContext) -> tuple[ErrorCode, str] | None:
    if authz.authorizer_of(ctx.broker) is None:
        return ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE
    if not authz.cluster_allowed(ctx, AclOperation.ALTER):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    return None


# Any for request and answer: CreateAcls v0 is built at run time (legacy_versions)
@handles(30, 0, 3)
async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "AclCreationResult")

    def every(code: ErrorCode, message: str) -> Any:
        results = tuple(
            build(result_type, error_code=code, error_message=message) for _ in request.creations
        )
        return build(response_type, throttle_time=NO_THROTTLE, results=results)

    refusal = _refusal(ctx)
    if refusal is not None:
        return every(*refusal)
    state = ctx.broker.state

    def visible(response: Any) -> bool:
        stored = _image_bindings(state.image)
        return all(
            r.error_code != ErrorCode.none or _binding(c) in stored
            for c, r in zip(request.creations, response.results, strict=False)
        )

    try:
        response = await ctx.broker.controller_channel.forward(ctx, request)
    except ControllerUnavailable:
        return every(ErrorCode.request_timed_out, "No active controller answered in time.")
    await ctx.broker.wait_for_metadata(lambda: visible(response), FORWARD_WAIT_S)
    return response


# Any for request and answer: DeleteAcls v0 is built at run time (legacy_versions)
@handles(31, 0, 3)
async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "DeleteAclsFilterResult")

    def every(code: ErrorCode, message: str) -> Any:
        results = tuple(
            build(result_type, error_code=code, error_message=message, matching_acls=())
            for _ in request.filters
        )
        return build(response_type, throttle_time=NO_THROTTLE, filter_results=results)

    refusal = _refusal(ctx)
    if refusal is not None:
        return every(*refusal)
    state = ctx.broker.state

    def visible(response: Any) -> bool:
        stored = _image_bindings(state.image)
        return not any(
            AclBinding(
                m.resource_type,
                m.resource_name,
                getattr(m, "pattern_type", PatternType.LITERAL),  # v1+
                m.principal,
                m.host,
                m.operation,
                m.permission_type,
            )
            in stored
            for r in response.filter_results
            for m in r.matching_acls
            if m.error_code == ErrorCode.none
        )

    try:
        response = await ctx.broker.controller_channel.forward(ctx, request)
    except ControllerUnavailable:
        return every(ErrorCode.request_timed_out, "No active controller answered in time.")
    await ctx.broker.wait_for_metadata(lambda: visible(response), FORWARD_WAIT_S)
    return response


# Controller listener -------------------------------------------------------------


def _service(ctx: RequestContext) -> Any:
    """The controller service, once the sender may change ACLs (ALTER on the cluster, or a
    forwarding broker's CLUSTER_ACTION)."""
    if not authz.controller_admin_allowed(ctx, authz.Op.ALTER):
        raise ControllerError(
            ErrorCode.cluster_authorization_failed,
            f"{ctx.principal} may not ALTER the cluster (change its ACLs)",
        )
    service = ctx.broker.controller_service
    if service is None or service.controller is None:
        raise ControllerError(ErrorCode.not_controller, "This node is not the active controller.")
    return service


# Any for request and answer: CreateAcls v0 is built at run time (legacy_versions)
@handles_controller(30, 0, 3)
async def controller_create_acls(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "AclCreationResult")
    try:
        service = _service(ctx)
    except ControllerError as exc:
        refused = build(result_type, error_code=exc.code, error_message=str(exc))
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            results=tuple(refused for _ in request.creations),
        )
    errors: list[tuple[ErrorCode, str | None]] = []
    wanted: list[AclBinding] = []
    for creation in request.creations:
        binding = _binding(creation)
        try:
            binding.validate()
        except InvalidAcl as exc:
            errors.append((ErrorCode.invalid_request, str(exc)))
            continue
        errors.append((ErrorCode.none, None))
        wanted.append(binding)

    def decide(controller: QuorumController) -> ControllerResult[None]:
        stored = _image_bindings(controller.image)
        records = []
        for b in wanted:
            if b in stored:
                continue
            stored.add(b)
            records.append(
                AccessControlEntryRecord(
                    id=uuid.uuid4(),
                    resource_type=b.resource_type,
                    resource_name=b.resource_name,
                    pattern_type=b.pattern_type,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission,
                )
            )
        return controller.propose(records)

    try:
        if wanted:
            await service.run(decide)
    except ControllerError as exc:
        errors = [(exc.code, str(exc)) for _ in errors]
    results = tuple(build(result_type, error_code=c, error_message=m) for c, m in errors)
    return build(response_type, throttle_time=NO_THROTTLE, results=results)


# Any for request and answer: DeleteAcls v0 is built at run time (legacy_versions)
@handles_controller(31, 0, 3)
async def controller_delete_acls(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "DeleteAclsFilterResult")
    matching_type = nested(response_type, "DeleteAclsMatchingAcl")
    filters = [_filter(f) for f in request.filters]

    def decide(controller: QuorumController) -> ControllerResult[list[list[AclBinding]]]:
        acls = controller.image.acls
        matched: list[list[AclBinding]] = []
        removed: list[uuid.UUID] = []
        seen: set[uuid.UUID] = set()
        for acl_filter in filters:
            found = []
            if acl_filter.unknown_part() is None:
                for acl_id, record in acls.items():
                    binding = binding_of(record)
                    if acl_filter.matches(binding):
                        found.append(binding)
                        if acl_id not in seen:
                            seen.add(acl_id)
                            removed.append(acl_id)
            matched.append(found)
        result = controller.propose([RemoveAccessControlEntryRecord(id=i) for i in removed])
        return ControllerResult(result.records, matched)

    try:
        matched = await _service(ctx).run(decide)
    except ControllerError as exc:
        results = tuple(
            build(result_type, error_code=exc.code, error_message=str(exc), matching_acls=())
            for _ in filters
        )
        return build(response_type, throttle_time=NO_THROTTLE, filter_results=results)
    out = []
    for acl_filter, found in zip(filters, matched, strict=True):
        problem = acl_filter.unknown_part()
        out.append(
            build(
                result_type,
                error_code=ErrorCode.invalid_request if problem else ErrorCode.none,
                error_message=problem,
                matching_acls=tuple(
                    build(
                        matching_type,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=b.resource_type,
                        resource_name=b.resource_name,
                        pattern_type=b.pattern_type,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in sorted(found, key=lambda b: (b.resource_type, b.resource_name))
                ),
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, filter_results=tuple(out))
