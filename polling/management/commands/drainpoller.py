"""``manage.py drainpoller NAME``: move a poller's shards away; it keeps running idle."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from polling.ownership import registration

logger = logging.getLogger("polling.console")


class Command(BaseCommand):
    help = "Drain a poller (its shards move to the others), or --resume a drained one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--resume", action="store_true", help="undo a drain")
        parser.add_argument("--reason", default="", help="written to the log")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"]
        try:
            if options["resume"]:
                registration.poller_resume(name=name)
            else:
                registration.poller_drain(name=name)
        except registration.PollerNotFound as error:
            raise CommandError(f"{error} (see the admin's Pollers page)") from error
        verb = "resumed" if options["resume"] else "draining"
        logger.info(
            "console: poller %s %s via drainpoller. Reason: %s", name, verb, options["reason"]
        )
        self.stdout.write(self.style.SUCCESS(f"poller {name}: {verb}"))
