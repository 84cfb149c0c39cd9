"""``manage.py lag``: per-shard owner, epoch, checkpoint, lag, due backlog, in flight and
held by flow control, then the keys holding jobs back."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from polling.reading.lag import shard_lag_report
from scheduling.sharding.clock import db_now


class Command(BaseCommand):
    help = (
        "Show each shard's owner, epoch, checkpoint, lag, due backlog, jobs in flight and "
        "jobs held by flow control (left out of lag and backlog), then the held keys."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, **options: Any) -> None:
        now = db_now()
        report = shard_lag_report(now=now)
        rows = report.rows
        if options["json"]:
            payload = {
                "now": now.isoformat(),
                "shards": [
                    {
                        **asdict(r),
                        "expires_at": r.expires_at.isoformat() if r.expires_at else None,
                        "checkpoint": r.checkpoint.isoformat() if r.checkpoint else None,
                    }
                    for r in rows
                ],
                "held_keys": [
                    {**asdict(k), "oldest": k.oldest.isoformat() if k.oldest else None}
                    for k in report.held_keys
                ],
            }
            self.stdout.write(json.dumps(payload, indent=2))
            return
        header = f"{'shard':>5}  {'owner':<24} {'epoch':>6}  {'checkpoint':<25} "
        header += f"{'lag_s':>8} {'backlog':>8} {'oldest_s':>9} {'in_flight':>9} {'held':>7}"
        self.stdout.write(header)
        for r in rows:
            checkpoint = r.checkpoint.isoformat() if r.checkpoint else "-"
            oldest = f"{r.oldest_due_age_seconds:.1f}" if r.oldest_due_age_seconds else "-"
            owner = (r.owner or "-") + (f" (pin {r.pinned_to})" if r.pinned_to else "")
            self.stdout.write(
                f"{r.shard:>5}  {owner:<24} {r.epoch:>6}  {checkpoint:<25} "
                f"{r.lag_seconds:>8.1f} {r.due_backlog:>8} {oldest:>9} {r.in_flight:>9} {r.held:>7}"
            )
        total = sum(r.due_backlog for r in rows)
        worst = max((r.lag_seconds for r in rows), default=0.0)
        in_flight = sum(r.in_flight for r in rows)
        held = sum(r.held for r in rows)
        self.stdout.write(
            f"{len(rows)} shards, due backlog {total}, in flight {in_flight}, max lag {worst:.1f}s,"
            f" held by flow control {held}"
        )
        if report.held_keys:
            self.stdout.write("held by flow control (not counted as lag):")
            self.stdout.write(
                f"  {'team':<20} {'key':<32} {'reason':<12} {'jobs':>8} {'oldest_s':>9}"
            )
            for k in report.held_keys:
                age = f"{(now - k.oldest).total_seconds():.1f}" if k.oldest else "-"
                self.stdout.write(f"  {k.team:<20} {k.key:<32} {k.reason:<12} {k.jobs:>8} {age:>9}")
