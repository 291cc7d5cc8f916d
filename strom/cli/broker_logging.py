"""Where the broker's log lines go and in what form.

Always stderr; with ``log.file`` also a file, rotated when it passes
``log.file.max.bytes`` with ``log.file.backup.count`` old files kept (``strom.log.1``
the newest). ``log.format=text`` (the default) writes ``time level logger: message``;
``log.format=json`` one JSON object per line (``time`` in UTC ISO 8601, ``level``,
``logger``, ``message``, and ``exception`` with the traceback when there is one), for
log collectors.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import sys
from pathlib import Path

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(
    level: str,
    log_format: str = "text",
    file: str = "",
    max_bytes: int = 0,
    backup_count: int = 0,
) -> None:
    """Send the root logger's records to stderr, and to ``file`` when one is named.
    Raises OSError when the file cannot be opened."""
    formatter: logging.Formatter = (
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if file:
        path = Path(file)
        handlers.append(
            logging.handlers.RotatingFileHandler(
                path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8"
            )
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
