"""ApiVersions (key 18), versions 0-4.

The ranges come from the router's table of the listener the request came in on. A
request for a version the broker does not know is answered (by the server, before
decoding) with UNSUPPORTED_VERSION and the ranges in a v0 body, as KIP-511 asks, so
the client can retry with a version both sides speak.
"""

from __future__ import annotations

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from strom.broker.common import NO_THROTTLE
from strom.broker.router import ROUTES, RequestContext, Route, handles, handles_controller
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested


def advertised(api_version_type: type, routes: dict[int, Route]) -> tuple:
    return tuple(
        build(
            api_version_type,
            api_key=r.api_key,
            min_version=r.min_version,
            max_version=r.max_version,
        )
        for r in sorted(routes.values(), key=lambda r: r.api_key)
    )


@handles_controller(18, 0, 4)
@handles(18, 0, 4)
def handle_api_versions(ctx: RequestContext, request: object) -> object:
    response_type = ctx.response_type
    return build(
        response_type,
        error_code=ErrorCode.none,
        api_keys=advertised(nested(response_type, "ApiVersion"), ctx.routes),
        throttle_time=NO_THROTTLE,
    )


def unsupported_version_response(
    routes: dict[int, Route] = ROUTES,
) -> ApiVersionsResponseV0:
    """The body sent for an ApiVersions request of an unknown version."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version, api_keys=advertised(ApiVersionV0, routes)
    )
