"""``manage.py moveshard SHARD... --to POLLER``: pin shards to a live poller (or unpin)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from polling.console.actions import live_poller_names
from polling.models import Poller, ShardLease
from polling.ownership import registration

logger = logging.getLogger("polling.console")


class Command(BaseCommand):
    help = "Pin shards to a live poller (it takes them within lease/3 plus a poll), or unpin."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("shards", nargs="+", type=int, metavar="SHARD")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--to", metavar="POLLER", help="the live poller to move them to")
        target.add_argument("--unpin", action="store_true", help="return them to the hash")
        parser.add_argument("--reason", default="", help="written to the log")

    def handle(self, *args: Any, **options: Any) -> None:
        shards = sorted(set(options["shards"]))
        known = set(ShardLease.objects.filter(shard__in=shards).values_list("shard", flat=True))
        unknown = [s for s in shards if s not in known]
        if unknown:
            top = ShardLease.objects.order_by("-shard").values_list("shard", flat=True).first()
            raise CommandError(
                f"no lease row for shard(s) {unknown}; shards are 0..{top}"
                if top is not None
                else f"no lease rows yet (start a poller first); asked for {unknown}"
            )
        target = options["to"]
        if target is not None:
            if not Poller.objects.filter(name=target).exists():
                raise CommandError(f"no poller named {target!r} (see the admin's Pollers page)")
            if target not in live_poller_names():
                raise CommandError(
                    f"poller {target!r} is not live (draining, stopped or no recent heartbeat); "
                    "a pin to it would be ignored"
                )
        for shard in shards:
            if target is None:
                registration.shard_unpin(shard=shard)
            else:
                registration.shard_pin(shard=shard, poller=target)
        where = f"pinned to {target}" if target else "unpinned"
        logger.info(
            "console: shards %s %s via moveshard. Reason: %s", shards, where, options["reason"]
        )
        self.stdout.write(self.style.SUCCESS(f"shard(s) {shards} {where}"))
