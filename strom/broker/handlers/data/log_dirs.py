"""DescribeLogDirs (key 35), versions 0-4 (v0 is v1's shape): what this broker keeps on its disk.

For its log directory (one per broker here: ``log.dirs`` names one): every partition
log it holds (or those of the topics asked for), with its size in bytes and, as Kafka
reports it for a replica that is not a future one, its offset lag max(0, high watermark
- log end offset); the directory's total and usable bytes (v4). A controller-only node
has no log directory and answers an empty list. ``strom log-dirs --describe`` asks
every broker. Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import os
from typing import Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested


# Any for request and answer: DescribeLogDirs v0 is built at run time (legacy_versions)
@handles(35, 0, 4)
def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    state = ctx.broker.state
    if not authz.cluster_allowed(ctx, authz.Op.DESCRIBE):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    if not state.hosts_logs:
        return build(
            response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=()
        )
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    by_topic: dict[str, list[Any]] = {}
    partition_type = nested(response_type, "DescribeLogDirsPartition")
    for partition_log in sorted(state.logs.all_logs(), key=lambda p: (p.topic, p.partition)):
        if wanted is not None and partition_log.partition not in wanted.get(
            partition_log.topic, ()
        ):
            continue
        lag = max(partition_log.high_watermark - partition_log.log_end_offset, 0)
        by_topic.setdefault(partition_log.topic, []).append(
            build(
                partition_type,
                partition_index=partition_log.partition,
                partition_size=partition_log.size_bytes,
                offset_lag=lag,
                is_future_key=False,
            )
        )
    log_dir = str(state.logs.log_dir)
    try:
        stats = os.statvfs(log_dir)
        total, usable = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    except OSError:
        total = usable = -1
    topic_type = nested(response_type, "DescribeLogDirsTopic")
    result = build(
        nested(response_type, "DescribeLogDirsResult"),
        error_code=ErrorCode.none,
        log_dir=log_dir,
        topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
        total_bytes=total,
        usable_bytes=usable,
    )
    return build(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,)
    )
