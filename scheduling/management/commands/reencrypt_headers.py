"""Seal every job's and schedule's header values again under the first encryption key."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from scheduling.jobs.resealing import headers_reseal
from scheduling.sealing import key_generate


class Command(BaseCommand):
    help = (
        "After a key rotation (a new key first in SENDLATER_ENCRYPTION_KEYS, the old one "
        "still listed): re-encrypt the stored header values of jobs and schedules with the "
        "first key, after which the old key may be removed. --new-key prints a new key "
        "and changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--new-key", action="store_true", help="print a new key and change nothing"
        )

    def handle(self, *args: object, **options: object) -> None:
        if options["new_key"]:
            self.stdout.write(key_generate())
            return
        jobs, schedules = headers_reseal()
        if int(str(options.get("verbosity", 1))) > 0:
            self.stdout.write(f"re-encrypted: {jobs} jobs, {schedules} schedules")
