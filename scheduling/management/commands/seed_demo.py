"""``manage.py seed_demo``: a demo team and a few jobs due within the next minute or two."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.errors import SchedulingError
from scheduling.jobs.services import JobSpec, job_schedule_many
from scheduling.models import TargetKind
from scheduling.sharding.clock import db_now
from scheduling.teams import api_key_create, team_get_or_create


class Command(BaseCommand):
    help = (
        "Create team 'demo' (if needed) and schedule a few webhook jobs to the demo "
        "receiver and a few 'log' handler jobs, due 30 to 90 seconds from now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--receiver", default="http://127.0.0.1:8001/hooks/demo")
        parser.add_argument("--jobs", type=int, default=6)
        parser.add_argument("--api-key", action="store_true", help="also print a new API key")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["jobs"] <= 1000:
            raise CommandError("--jobs must lie in 1..1000")
        team, _ = team_get_or_create(slug="demo", name="Demo")
        now = db_now()
        specs = []
        for i in range(options["jobs"]):
            due = now + timedelta(seconds=30 + 60 * i / max(options["jobs"] - 1, 1))
            webhook = i % 3 != 2
            specs.append(
                JobSpec(
                    due_at=due,
                    target_kind=TargetKind.WEBHOOK if webhook else TargetKind.HANDLER,
                    target=options["receiver"] if webhook else "log",
                    payload={"demo": i, "message": f"hello #{i} from sendlater"},
                    metadata={"source": "seed_demo"},
                )
            )
        try:
            results = job_schedule_many(team=team, specs=specs)
        except SchedulingError as error:
            raise CommandError(f"{error.field}: {error.message}") from error
        first = min(job.due_at for job, _ in results)
        last = max(job.due_at for job, _ in results)
        self.stdout.write(
            f"seeded {len(results)} demo jobs due {first:%H:%M:%S} to {last:%H:%M:%S} UTC "
            f"(webhooks to {options['receiver']} and 'log' handler jobs)"
        )
        if options["api_key"]:
            _key, key = api_key_create(team=team, name="demo")
            self.stdout.write(f"demo api_key: {key}")
