"""``manage.py runservice``: the web app (gunicorn) and N pollers under one supervisor.

Used by ``make run``. Ctrl-C (SIGINT) or SIGTERM stops every child: pollers finish
their batch and release their leases, gunicorn stops its workers. If any child
dies on its own, the others are stopped too and the command exits non-zero, so a
half-running service never goes unnoticed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from polling.common.processes import processes_stop

_STOP_GRACE_SECONDS = 30


class Command(BaseCommand):
    help = "Run gunicorn and N pollers together; Ctrl-C stops them all."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:8000", help="gunicorn host:port")
        parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
        parser.add_argument("--pollers", type=int, default=2, help="runpoller processes")
        parser.add_argument(
            "--demo-receiver",
            type=int,
            default=None,
            metavar="PORT",
            help="also run the demo webhook receiver on 127.0.0.1:PORT",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 <= options["pollers"] <= 64:
            raise CommandError("--pollers must lie in 0..64")
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        commands = [
            [
                sys.executable,
                "-m",
                "gunicorn",
                "sendlater_site.wsgi",
                "--bind",
                options["bind"],
                "--workers",
                str(options["workers"]),
                "--access-logfile",
                "-",
            ]
        ]
        commands += [[sys.executable, manage, "runpoller"] for _ in range(options["pollers"])]
        if options["demo_receiver"] is not None:
            port = str(options["demo_receiver"])
            commands.append([sys.executable, manage, "demo_receiver", "--port", port])
        stopping = False

        def on_signal(signum: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        # Fixed argv lists built above (this interpreter, this manage.py): no shell.
        children = [subprocess.Popen(cmd, cwd=settings.BASE_DIR) for cmd in commands]  # noqa: S603
        self.stderr.write(
            f"runservice: gunicorn on {options['bind']}, {options['pollers']} pollers"
            + (
                f", demo receiver on :{options['demo_receiver']}"
                if options["demo_receiver"]
                else ""
            )
        )
        failed = None
        while not stopping and failed is None:
            time.sleep(0.3)
            failed = next((c for c in children if c.poll() is not None), None)
        if failed is not None:
            self.stderr.write(f"runservice: {failed.args[2:4]} exited with {failed.returncode}")
        processes_stop(children, grace_seconds=_STOP_GRACE_SECONDS)
        if failed is not None:
            raise CommandError("a child process exited; stopped the others")
