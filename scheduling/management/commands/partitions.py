"""Jobs-table partitions and retention: --list, --ensure [--days N], --prune."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling import conf
from scheduling.sharding.clock import db_now
from scheduling.storage.partitions import is_partitioned, partitions_ensure, partitions_list
from scheduling.storage.retention import retention_prune

SQLITE_NOTE = (
    "SQLite keeps the jobs table as a plain table: there are no partitions. "
    "Retention there deletes old terminal rows in batches of 1,000 (--prune)."
)


class Command(BaseCommand):
    help = "List or create jobs-table partitions ahead (PostgreSQL), and apply retention."

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--list", action="store_true", help="ranges and row estimates")
        action.add_argument("--ensure", action="store_true", help="create missing partitions")
        action.add_argument("--prune", action="store_true", help="apply retention now")
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="with --ensure: days ahead (default SENDLATER_PARTITION_AHEAD_DAYS, "
            "the max horizon + 2)",
        )

    def handle(self, *args: object, **options: object) -> None:
        if options["list"]:
            self._list()
        elif options["ensure"]:
            days = options["days"]
            if days is not None and int(days) < 0:  # type: ignore[call-overload]
                raise CommandError("--days must not be negative")
            self._ensure(days)  # type: ignore[arg-type]
        else:
            self._prune()

    def _list(self) -> None:
        if not is_partitioned():
            self.stdout.write(SQLITE_NOTE)
            return
        for part in partitions_list():
            rows = "?" if part.rows_estimate < 0 else f"~{part.rows_estimate}"
            if part.is_default:
                self.stdout.write(f"{part.name}  DEFAULT (strays)  rows {rows}")
            else:
                assert part.start is not None and part.end is not None
                span = f"{part.start:%Y-%m-%d %H:%M} .. {part.end:%Y-%m-%d %H:%M}"
                self.stdout.write(f"{part.name}  [{span})  rows {rows}")

    def _ensure(self, days: int | None) -> None:
        if not is_partitioned():
            self.stdout.write(SQLITE_NOTE)
            return
        ahead = conf.partition_ahead_days() if days is None else days
        created = partitions_ensure(now=db_now(), days=ahead)
        for name, moved in created:
            self.stdout.write(f"created {name} ({moved} rows moved out of the DEFAULT partition)")
        self.stdout.write(f"{len(created)} partitions created; covered {ahead} days ahead")

    def _prune(self) -> None:
        if not is_partitioned():
            self.stdout.write(SQLITE_NOTE)
        report = retention_prune(now=db_now())
        if report.busy:
            raise CommandError("another pruner holds the retention lock; try again later")
        for name in report.dropped:
            self.stdout.write(f"dropped {name}")
        self.stdout.write(
            f"retention {conf.retention().days} days (dead letters "
            f"{conf.dead_retention().days}): {len(report.dropped)} partitions dropped, "
            f"{report.moved} rows moved forward, {report.deleted} rows deleted"
        )
