"""Periodic duties a poller runs between reads, one module a duty: partitions ahead
and retention (``storage``), recurring schedules materialized as jobs
(``schedules``), the schedules' occurrence ledger pruned behind each floor
(``ledger_prune``). Imports ``common`` and ``ownership``."""
