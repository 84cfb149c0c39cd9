"""Recurring schedules: their rows (``models``), when they fire (``recurrence``: cron
in a time zone or an interval, pure) and the writes and reads (``services``). The
pollers materialize occurrences (``polling.upkeep.schedules``). Imports ``jobs``,
``sharding`` and the base modules."""
