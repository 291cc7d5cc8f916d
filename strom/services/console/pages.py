"""The console's HTML: every page rendered on the server, with its styles inline and
its charts as inline SVG, so the console needs nothing from the internet and works
with scripts off.

Owns the layout, the tables and forms of each page, and ``chart`` (a line chart of
(time, value) points). Every string from the cluster is escaped.

Does not own where the data comes from (``backend``) or HTTP (``app``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from html import escape
from typing import Any
from urllib.parse import quote

from strom.connect.rest_client import ConnectorState
from strom.services.console.backend import (
    GroupInfo,
    Message,
    ShareGroupInfo,
    TopicInfo,
    render_value,
)

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;
background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:center}
header a{color:#dfe8f5;text-decoration:none;font-weight:500}header a.on{color:#fff;
border-bottom:2px solid #fff}header b{font-size:16px;margin-right:12px}
main{padding:16px 20px;max-width:1400px}h1{font-size:20px;margin:6px 0 14px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:12px}
th,td{border-bottom:1px solid #e3e6ea;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:700px;font-size:12px}
form.inline{display:flex;gap:8px;flex-wrap:wrap;align-items:end;background:#fff;padding:10px;
border:1px solid #e3e6ea;margin-bottom:12px}label{display:flex;flex-direction:column;font-size:12px}
input,select{padding:4px 6px;font:inherit}button{padding:5px 12px;font:inherit;cursor:pointer}
.err{background:#fde8e8;border:1px solid #f5b5b5;padding:8px 12px;margin-bottom:12px}
.ok{background:#e6f6ea;border:1px solid #a9dcb5;padding:8px 12px;margin-bottom:12px}
.bad{color:#b42318;font-weight:600}.muted{color:#6b7380}
.cards{display:flex;gap:12px;margin-bottom:14px}.card{background:#fff;border:1px solid #e3e6ea;
padding:10px 16px;min-width:120px}.card b{display:block;font-size:22px}
svg{background:#fff;border:1px solid #e3e6ea}
"""

NAV = (
    ("/", "Cluster"),
    ("/topics", "Topics"),
    ("/groups", "Consumer groups"),
    ("/share-groups", "Share groups"),
    ("/connect", "Connect"),
)


def layout(title: str, body: str, active: str = "/", note: str = "", error: str = "") -> str:
    links = "".join(
        f'<a href="{href}"{" class=on" if href == active else ""}>{escape(name)}</a>'
        for href, name in NAV
    )
    banner = ""
    if error:
        banner += f'<div class="err" id="error">{escape(error)}</div>'
    if note:
        banner += f'<div class="ok" id="note">{escape(note)}</div>'
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)} · Strom console</title><style>{STYLE}</style></head>"
        f"<body><header><b>Strom console</b>{links}</header><main>{banner}"
        f"<h1>{escape(title)}</h1>{body}</main></body></html>"
    )


def _table(
    headers: Iterable[str],
    rows: Iterable[Iterable[str]],
    numeric: frozenset[int] | set[int] = frozenset(),
) -> str:
    head = "".join(
        f"<th{' class=n' if i in numeric else ''}>{escape(h)}</th>" for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i in numeric else ''}>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _size(value: int | None) -> str:
    if value is None:
        return '<span class="muted">?</span>'
    amount: float = value
    for unit in ("B", "KB", "MB", "GB"):
        if amount < 1024 or unit == "GB":
            return f"{amount:,.0f} {unit}" if unit == "B" else f"{amount:,.1f} {unit}"
        amount /= 1024
    return str(amount)


def _num(value: float | None, digits: int = 0) -> str:
    return '<span class="muted">-</span>' if value is None else f"{value:,.{digits}f}"


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def chart(
    points: list[tuple[float, float]], label: str, width: int = 640, height: int = 170
) -> str:
    """A line chart of (unix time, value) points as inline SVG."""
    if len(points) < 2:
        return (
            f'<p class="muted">{escape(label)}: not enough samples yet (the console samples '
            "every few seconds while it runs).</p>"
        )
    left, right, top, bottom = 60, 10, 10, 24
    t0, t1 = points[0][0], points[-1][0]
    high = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * (width - left - right)

    def y(v: float) -> float:
        return top + (1 - v / high) * (height - top - bottom)

    line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    minutes = span / 60
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(label)}">'
        f'<text x="4" y="{top + 10}" font-size="11">{high:,.0f}</text>'
        f'<text x="4" y="{height - bottom}" font-size="11">0</text>'
        f'<text x="{left}" y="{height - 6}" font-size="11">{minutes:.1f} min ago</text>'
        f'<text x="{width - 40}" y="{height - 6}" font-size="11">now</text>'
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        'stroke="#ccd2da"/>'
        f'<polyline fill="none" stroke="#2f6fb3" stroke-width="2" points="{line}"/>'
        f'<text x="{left + 6}" y="{top + 10}" font-size="12" fill="#1f3a5f">{escape(label)}'
        f": {points[-1][1]:,.1f}</text></svg>"
    )


# Pages ------------------------------------------------------------------------------------


def cluster_page(cluster: dict[str, Any], topics: int, groups: int, bootstrap: str) -> str:
    rows = [
        (
            str(broker_id) + (" (controller)" if broker_id == cluster["controller"] else ""),
            escape(host),
            str(port),
            escape(rack or "-"),
        )
        for broker_id, host, port, rack in cluster["brokers"]
    ]
    cards = (
        f'<div class="cards"><div class="card"><b id="brokers">{len(rows)}</b>brokers</div>'
        f'<div class="card"><b>{topics}</b><a href="/topics">topics</a></div>'
        f'<div class="card"><b>{groups}</b><a href="/groups">consumer groups</a></div></div>'
    )
    body = (
        f"{cards}<p>Cluster id <code>{escape(cluster['cluster_id'] or '-')}</code>, "
        f"controller {cluster['controller']}, bootstrap <code>{escape(bootstrap)}</code></p>"
        "<h2>Brokers</h2>" + _table(("id", "host", "port", "rack"), rows, {2})
    )
    return layout("Cluster", body, "/")


def topics_page(
    topics: list[TopicInfo], rates: dict[str, float | None], search: str, note: str, error: str
) -> str:
    shown = [t for t in topics if search.lower() in t.name.lower()] if search else topics
    rows = [
        (
            f'<a href="/topics/{quote(t.name, safe="")}">{escape(t.name)}</a>'
            + (' <span class="muted">internal</span>' if t.internal else ""),
            str(len(t.partitions)),
            str(t.replication),
            f"{t.messages:,}",
            _size(t.size),
            _num(rates.get(t.name), 1),
            f'<span class="bad">{t.under_replicated}</span>' if t.under_replicated else "0",
        )
        for t in shown
    ]
    create = (
        '<form class="inline" method="post" action="/topics">'
        '<label>name<input name="name" required></label>'
        '<label>partitions<input name="partitions" type="number" min="1" value="1"></label>'
        '<label>replication factor<input name="replication" type="number" min="1" '
        'placeholder="broker default"></label>'
        '<label>configs (key=value, ...)<input name="configs" size="30">'
        "</label><button>Create topic</button></form>"
    )
    find = (
        '<form class="inline" method="get" action="/topics"><label>search'
        f'<input name="q" value="{escape(search)}"></label><button>Find</button></form>'
    )
    table = _table(
        ("topic", "partitions", "replicas", "messages", "size", "records/s", "under-replicated"),
        rows,
        {1, 2, 3, 4, 5, 6},
    )
    summary = f"<p class=muted>{len(shown)} of {len(topics)} topics</p>"
    return layout("Topics", create + find + summary + table, "/topics", note, error)


def topic_page(
    topic: TopicInfo, rate_points: list[tuple[float, float]], note: str, error: str
) -> str:
    name = quote(topic.name, safe="")
    partitions = _table(
        ("partition", "leader", "replicas", "in-sync replicas", "start", "end", "size"),
        [
            (
                str(p.partition),
                str(p.leader) if p.leader >= 0 else '<span class="bad">none</span>',
                ",".join(map(str, p.replicas)),
                (",".join(map(str, p.isr)))
                + (
                    ' <span class="bad">under-replicated</span>'
                    if len(p.isr) < len(p.replicas)
                    else ""
                ),
                f"{p.start:,}",
                f"{p.end:,}",
                _size(p.size),
            )
            for p in topic.partitions
        ],
        {0, 1, 4, 5, 6},
    )
    configs = _table(
        ("config", "value", "source"),
        [
            (
                escape(key),
                escape(value if value is not None else "null"),
                "default" if default else "<b>set on the topic</b>",
            )
            for key, value, default in topic.configs
        ],
    )
    alter = (
        f'<form class="inline" method="post" action="/topics/{name}/configs">'
        '<label>config<input name="key" required></label><label>value (empty: back to the '
        'default)<input name="value"></label><button>Alter</button></form>'
    )
    delete = (
        f'<form class="inline" method="post" action="/topics/{name}/delete">'
        f'<label>type the name to delete<input name="confirm" required></label>'
        "<button>Delete topic</button></form>"
    )
    body = (
        f'<p><a href="/topics/{name}/messages">Browse messages</a> · {topic.messages:,} '
        f"messages, {len(topic.partitions)} partitions, replication {topic.replication}</p>"
        + chart(rate_points, "records/s")
        + "<h2>Partitions</h2>"
        + partitions
        + "<h2>Configs</h2>"
        + alter
        + configs
        + "<h2>Delete</h2>"
        + delete
    )
    return layout(f"Topic {topic.name}", body, "/topics", note, error)


def messages_page(
    topic: str,
    partitions: list[int],
    query: dict[str, str],
    messages: list[Message] | None,
    error: str,
) -> str:
    def selected(field: str, value: str) -> str:
        return " selected" if query.get(field, "") == value else ""

    partition_options = '<option value="">all</option>' + "".join(
        f'<option value="{p}"{selected("partition", str(p))}>{p}</option>' for p in partitions
    )
    start_options = "".join(
        f'<option value="{value}"{selected("from", value)}>{label}</option>'
        for value, label in (
            ("end", "the end (latest)"),
            ("beginning", "the beginning"),
            ("offset", "an offset"),
            ("time", "a time (ms or ISO)"),
        )
    )
    format_options = "".join(
        f'<option value="{f}"{selected("format", f)}>{label}</option>'
        for f, label in (
            ("text", "text"),
            ("json", "json"),
            ("hex", "hex"),
            ("registry", "decoded with the schema registry"),
        )
    )
    form = (
        '<form class="inline" method="get">'
        f'<label>partition<select name="partition">{partition_options}</select></label>'
        f'<label>from<select name="from">{start_options}</select></label>'
        f'<label>offset or time<input name="at" value="{escape(query.get("at", ""))}"></label>'
        f'<label>limit<input name="limit" type="number" min="1" max="1000" '
        f'value="{escape(query.get("limit", "50"))}"></label>'
        f'<label>key is<input name="key" value="{escape(query.get("key", ""))}"></label>'
        f'<label>text contains<input name="text" value="{escape(query.get("text", ""))}">'
        f'</label><label>show as<select name="format">{format_options}</select></label>'
        "<button>Show</button></form>"
    )
    form_ = query.get("format", "text")
    if form_ == "registry":
        form_ = "json"  # the app decoded them to JSON
    if messages is None:
        results = ""
    elif not messages:
        results = '<p class="muted" id="no-messages">No messages.</p>'
    else:
        results = _table(
            ("partition", "offset", "timestamp", "key", "value", "headers"),
            [
                (
                    str(m.partition),
                    str(m.offset),
                    _time(m.timestamp_ms),
                    f"<pre>{escape(render_value(m.key, form_))}</pre>",
                    f'<pre class="value">{escape(render_value(m.value, form_))}</pre>',
                    escape(", ".join(f"{k}={render_value(v, 'text')}" for k, v in m.headers)),
                )
                for m in messages
            ],
            {0, 1},
        )
    link = f'<p><a href="/topics/{quote(topic, safe="")}">Back to the topic</a></p>'
    return layout(f"Messages of {topic}", link + form + results, "/topics", error=error)


def groups_page(groups: list[GroupInfo], error: str) -> str:
    rows = [
        (
            f'<a href="/groups/{quote(g.group_id, safe="")}">{escape(g.group_id)}</a>',
            escape(g.state),
            escape(g.kind),
            str(len({p.topic for p in g.partitions})),
            f"{g.lag:,}",
        )
        for g in groups
    ]
    table = _table(("group", "state", "protocol", "topics", "lag"), rows, {3, 4})
    return layout("Consumer groups", table, "/groups", error=error)


def share_groups_page(groups: list[ShareGroupInfo], error: str) -> str:
    """Share groups (KIP-932): state, members, and per share-partition the start offset
    (the first record not yet finished with) and the lag."""
    rows = [
        (
            f'<span id="share-{escape(g.group_id)}">{escape(g.group_id)}</span>',
            escape(g.state),
            str(g.members),
            str(len(g.partitions)),
            f"{g.lag:,}",
        )
        for g in groups
    ]
    table = _table(("share group", "state", "members", "share-partitions", "lag"), rows, {2, 3, 4})
    details = _table(
        ("share group", "topic", "partition", "start offset", "lag"),
        [
            (
                escape(g.group_id),
                f'<a href="/topics/{quote(p.topic, safe="")}">{escape(p.topic)}</a>',
                str(p.partition),
                _num(p.start if p.start >= 0 else None),
                _num(p.lag if p.lag >= 0 else None),
            )
            for g in groups
            for p in g.partitions
        ],
        {2, 3, 4},
    )
    body = table + (
        "<h2>Share-partitions</h2>" + details if any(g.partitions for g in groups) else ""
    )
    if not groups and not error:
        body = '<p class="muted">No share groups.</p>'
    return layout("Share groups", body, "/share-groups", error=error)


def group_page(
    group: GroupInfo, lag_points: list[tuple[float, float]], note: str, error: str
) -> str:
    gid = quote(group.group_id, safe="")
    members = _table(
        ("member", "client id", "host", "instance", "partitions"),
        [
            (
                escape(m["member_id"]),
                escape(m["client_id"] or ""),
                escape(m["host"] or ""),
                escape(m["instance"] or "-"),
                escape(", ".join(f"{t}-{p}" for t, p in m["assignment"])),
            )
            for m in group.members
        ],
    )
    partitions = _table(
        ("topic", "partition", "committed", "end", "lag"),
        [
            (
                escape(p.topic),
                str(p.partition),
                f"{p.committed:,}",
                f"{p.end:,}",
                f'<span class="lag">{p.lag:,}</span>',
            )
            for p in group.partitions
        ],
        {1, 2, 3, 4},
    )
    topics = sorted({p.topic for p in group.partitions})
    reset = (
        f'<form class="inline" method="post" action="/groups/{gid}/reset">'
        '<label>topic<select name="topic">'
        + "".join(f'<option value="{escape(t)}">{escape(t)}</option>' for t in topics)
        + '</select></label><label>to<select name="to"><option value="earliest">earliest'
        '</option><option value="latest">latest</option><option value="offset">an offset'
        '</option><option value="time">a time (ms)</option></select></label>'
        '<label>offset or time<input name="value"></label><button>Reset offsets</button>'
        '</form><p class="muted">Only a group without members can have its offsets reset.</p>'
    )
    body = (
        f'<p>State <b id="state">{escape(group.state)}</b>, protocol {escape(group.kind)}, '
        f'total lag <b id="lag">{group.lag:,}</b></p>'
        + chart(lag_points, "lag")
        + "<h2>Members</h2>"
        + (members if group.members else '<p class="muted">No members.</p>')
        + "<h2>Offsets and lag</h2>"
        + partitions
        + "<h2>Reset offsets</h2>"
        + reset
    )
    return layout(f"Group {group.group_id}", body, "/groups", note, error)


CONNECTOR_ACTIONS = ("pause", "resume", "restart", "stop")


def _state(state: str) -> str:
    return f'<span class="bad">{escape(state)}</span>' if state == "FAILED" else escape(state)


def _trace(trace: str | None) -> str:
    if not trace:
        return ""
    return f"<details><summary>trace</summary><pre>{escape(trace)}</pre></details>"


def connect_page(
    connectors: list[ConnectorState] | None, connect_url: str | None, note: str, error: str
) -> str:
    """The connectors of a Connect worker's cluster, their tasks, and what may be done to
    them; without a worker configured, how to name one."""
    if connect_url is None:
        body = (
            '<p class="muted">No Connect worker is configured: start the console with '
            "<code>--connect-url http://HOST:8083</code>.</p>"
        )
        return layout("Connect", body, "/connect", note, error)
    rows = []
    for connector in connectors or []:
        tasks = "<br>".join(
            f"{t.task_id}: {_state(t.state)} <span class=muted>{escape(t.worker_id)}</span>"
            + _trace(t.trace)
            for t in connector.tasks
        )
        actions = "".join(
            f'<form method="post" action="/connect/{quote(connector.name, safe="")}/{action}"'
            f' style="display:inline"><button>{action}</button></form>'
            for action in CONNECTOR_ACTIONS
        )
        rows.append(
            (
                escape(connector.name),
                escape(connector.type),
                escape(connector.connector_class),
                _state(connector.state) + _trace(connector.trace),
                escape(connector.worker_id),
                tasks or '<span class="muted">none</span>',
                actions,
            )
        )
    header = ("connector", "type", "class", "state", "worker", "tasks", "")
    table = _table(header, rows, set()) if rows else '<p class="muted">No connectors.</p>'
    intro = f'<p class="muted">Worker: {escape(connect_url)}</p>'
    return layout("Connect", intro + table, "/connect", note, error)
