"""Print the sizing figures of DESIGN.md for a peak rate, shard and poller count."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.sharding import sizing


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from error
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


class Command(BaseCommand):
    help = "Capacity planner: partition sizes, drain rates, per-poller load, warnings, advice."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--peak-per-minute", required=True, type=_whole(0))
        parser.add_argument("--shards", required=True, type=_whole(1))
        parser.add_argument("--pollers", required=True, type=_whole(1))
        parser.add_argument("--bucket-seconds", type=_whole(1), default=None)
        parser.add_argument(
            "--precision-seconds",
            type=float,
            default=None,
            help="precision target for the recommendation (default: the bucket width)",
        )
        parser.add_argument(
            "--poller-capacity",
            type=float,
            default=None,
            help="measured jobs/s of one poller (default SENDLATER_POLLER_CAPACITY_PER_SECOND)",
        )

    def handle(self, *args: object, **opts: object) -> None:
        width = opts["bucket_seconds"] or settings.SENDLATER_BUCKET_SECONDS
        capacity = opts["poller_capacity"] or settings.SENDLATER_POLLER_CAPACITY_PER_SECOND
        if capacity <= 0:
            raise CommandError("--poller-capacity must be positive")
        result = sizing.plan(
            peak_per_minute=opts["peak_per_minute"],
            shards=opts["shards"],
            pollers=opts["pollers"],
            bucket_seconds=width,
            poller_capacity_per_second=capacity,
        )
        out = self.stdout.write
        out(
            f"peak: {result.peak_per_minute:,} jobs/minute, {result.shards} shards, "
            f"{result.pollers} pollers, {result.bucket_seconds} s buckets"
        )
        out(f"jobs per partition per bucket: {result.jobs_per_partition:,.0f}")
        out(
            f"drain rate per partition: about {result.partition_drain_per_second:,.0f} jobs/s "
            f"({result.partition_drain_per_second:,.1f})"
        )
        out(
            f"rate per poller: about {result.per_poller_per_second:,.0f} jobs/s "
            f"({result.per_poller_per_second:,.1f}; {result.active_pollers} active pollers)"
        )
        out(f"single-poller capacity assumed: {capacity:,.0f} jobs/s")
        for warning in result.warnings:
            out(self.style.WARNING(f"warning: {warning}"))
        if not result.warnings:
            out("warnings: none")
        precision = opts["precision_seconds"] or float(width)
        if precision <= 0:
            raise CommandError("--precision-seconds must be positive")
        advice = sizing.recommend(
            peak_per_minute=result.peak_per_minute,
            precision_seconds=precision,
            poller_capacity_per_second=capacity,
            max_shards=settings.SENDLATER_MAX_SHARDS,
        )
        out(
            f"recommendation: S = {advice.shards}, W = {advice.bucket_seconds} s, "
            f"N = {advice.pollers} pollers (precision target {precision:g} s)"
        )
        for reason in advice.reasons:
            out(f"  - {reason}")
