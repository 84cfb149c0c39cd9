"""``manage.py demo_receiver``: a local webhook endpoint that verifies and logs deliveries."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from polling.management.demo_receiver import serve


class Command(BaseCommand):
    help = "Serve a demo webhook receiver that verifies signatures and logs each delivery."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("sendlater.demo_receiver").setLevel(logging.INFO)
        try:
            server = serve(options["host"], options["port"])
        except OSError as error:
            raise CommandError(
                f"cannot listen on {options['host']}:{options['port']}: {error}"
            ) from error
        self.stderr.write(
            f"demo receiver on http://{options['host']}:{options['port']}/ (any path)"
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
