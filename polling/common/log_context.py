"""Fixed log context for a whole process (a runpoller stamps its poller name)."""

from __future__ import annotations

import logging


class ProcessContext(logging.Filter):
    """Stamp every record of this process with fixed context (e.g. the poller name)."""

    def __init__(self, **fields: object) -> None:
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in self.fields.items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        return True
