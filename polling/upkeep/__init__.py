"""Periodic duties a poller runs between reads, one module a duty: partitions ahead
and retention (``storage``), recurring schedules materialized as jobs
(``schedules``). Imports ``common`` and ``ownership``."""
