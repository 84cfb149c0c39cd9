"""``manage.py reshard --shards N --effective-from ISO``: schedule a shard-count cutover."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from polling.console.cutover import cutover_preview
from scheduling.errors import InvalidCutover
from scheduling.sharding.clock import db_now
from scheduling.sharding.cutovers import cutover_schedule


class Command(BaseCommand):
    help = "Schedule a new shard count for buckets from a future bucket boundary on."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--shards", type=int, required=True, help="the new shard count")
        parser.add_argument(
            "--effective-from",
            required=True,
            help="a future bucket boundary with a UTC offset, e.g. 2027-01-01T00:00Z",
        )
        parser.add_argument("--reason", default="", help="kept with the schedule row")
        parser.add_argument(
            "--dry-run", action="store_true", help="print the sizing preview, schedule nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        raw = options["effective_from"].replace("Z", "+00:00").replace("z", "+00:00")
        effective_from = parse_datetime(raw)
        if effective_from is None:
            raise CommandError(
                f"--effective-from {options['effective_from']!r} is not an ISO 8601 datetime "
                "(e.g. 2027-01-01T00:00Z)."
            )
        if effective_from.tzinfo is None:
            raise CommandError("--effective-from needs a UTC offset (e.g. ...T00:00Z).")
        now = db_now()
        shards = options["shards"]
        if shards >= 1:
            preview = cutover_preview(shard_count=shards, effective_from=effective_from, now=now)
            self.stdout.write(
                f"peak {preview.peak.per_minute} jobs/min, {preview.pollers} live poller(s); "
                f"{preview.current_shards} -> {shards} shards: "
                f"{preview.proposed.jobs_per_partition:,.1f} jobs per partition per bucket, "
                f"{preview.proposed.partition_drain_per_second:,.2f} jobs/s per partition, "
                f"{preview.proposed.per_poller_per_second:,.2f} jobs/s per poller; "
                f"{preview.recorded_after} recorded bucket(s) after it keep their count"
            )
            for warning in preview.proposed.warnings:
                self.stdout.write(f"warning: {warning}")
        if options["dry_run"]:
            return
        try:
            row = cutover_schedule(
                shard_count=shards, effective_from=effective_from, reason=options["reason"], now=now
            )
        except InvalidCutover as error:
            raise CommandError(error.message) from error
        self.stdout.write(
            self.style.SUCCESS(
                f"scheduled: {row.shard_count} shards from {row.effective_from.isoformat()}"
            )
        )
