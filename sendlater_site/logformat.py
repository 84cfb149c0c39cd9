"""JSON log lines (SENDLATER_LOG_FORMAT=json) with the service's context fields."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

# Passed as ``extra={...}`` by pollers, services and sinks.
CONTEXT_FIELDS = ("poller", "shard", "bucket", "job_id", "team", "epoch", "batch_size")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
