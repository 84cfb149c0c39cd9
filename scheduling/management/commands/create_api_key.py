"""Create an API key for a team (creating the team if needed) and print it once."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.errors import SchedulingError
from scheduling.teams import api_key_create, team_get_or_create


class Command(BaseCommand):
    help = (
        "Create an API key for team --team (created if it does not exist). The last two "
        "lines are 'api_key: <key>' and 'signing_secret: whsec_...'. The key is shown "
        "only now: only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team slug, e.g. billing")
        parser.add_argument("--team-name", default="", help="display name for a new team")
        parser.add_argument("--name", default="", help="a label for the key, e.g. 'ci'")

    def handle(self, *args: object, **options: str) -> None:
        try:
            team, created = team_get_or_create(slug=options["team"], name=options["team_name"])
        except SchedulingError as error:
            raise CommandError(error.message) from error
        _api_key, key = api_key_create(team=team, name=options["name"])
        self.stdout.write(f"team: {team.slug}{' (created)' if created else ''}")
        self.stdout.write(f"api_key: {key}")
        self.stdout.write(f"signing_secret: {team.signing_secret}")
