"""``manage.py runpoller``: parse options, build a Poller, run it until a signal."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection
from prometheus_client import start_http_server

from polling import conf
from polling.common.log_context import ProcessContext
from polling.dispatch.router import Router, sinks_build
from polling.engine.poller import Poller
from polling.ownership import stall_bounds
from polling.ownership.registration import PollerNameInUse
from scheduling import handlers
from scheduling.storage.gcpause import gc_settle

logger = logging.getLogger("polling.runpoller")

_NAME_MAX = 200
_SWITCH_INTERVAL_SECONDS = 0.001


class Command(BaseCommand):
    help = "Run a poller: own shards through leases and deliver due jobs."
    # Checks run after the database check below, so an unreachable database is
    # reported as such rather than as a traceback from a system check.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", help="poller name (default: host-pid); unique per process")
        parser.add_argument("--batch-size", type=int, default=None, help="rows per claim")
        parser.add_argument(
            "--concurrency", type=int, default=None, help="handler threads (in-process handlers)"
        )
        parser.add_argument(
            "--window",
            type=int,
            default=None,
            help="jobs in flight at once (claimed, not yet written back; SENDLATER_WINDOW)",
        )
        parser.add_argument(
            "--poll-interval", type=float, default=None, help="idle sleep in seconds"
        )
        parser.add_argument(
            "--once", action="store_true", help="one pass over owned shards, then exit"
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="serve Prometheus metrics on this port (default: none)",
        )
        parser.add_argument(
            "--metrics-addr", default="127.0.0.1", help="address for --metrics-port"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"] or f"{socket.gethostname()}-{os.getpid()}"
        batch_size = _option(options["batch_size"], conf.batch_size(), "--batch-size", int)
        concurrency = _option(options["concurrency"], conf.concurrency(), "--concurrency", int)
        window = _option(options["window"], conf.window(), "--window", int)
        interval = _option(
            options["poll_interval"], conf.poll_interval_seconds(), "--poll-interval", float
        )
        if not name.strip() or len(name) > _NAME_MAX:
            raise CommandError(f"--name must be 1 to {_NAME_MAX} characters")
        if not 1 <= batch_size <= 10_000:
            raise CommandError(f"--batch-size must lie in 1..10000 (got {batch_size})")
        if not 1 <= concurrency <= 1_000:
            raise CommandError(f"--concurrency must lie in 1..1000 (got {concurrency})")
        if not 1 <= window <= 100_000:
            raise CommandError(f"--window must lie in 1..100000 (got {window})")
        if not 0.01 <= interval <= 3600:
            raise CommandError(f"--poll-interval must lie in 0.01..3600 seconds (got {interval})")
        # -v 0: warnings only; -v 1 (default): as LOG_LEVEL says; -v 2: every batch.
        if options["verbosity"] != 1:
            level = logging.WARNING if options["verbosity"] == 0 else logging.DEBUG
            logging.getLogger("polling").setLevel(level)
        handlers.load_modules(settings.SENDLATER_HANDLER_MODULES)
        # Every log line of this process names its poller (a field in JSON logs).
        for handler in logging.getLogger().handlers:
            handler.addFilter(ProcessContext(poller=name))
        stall_bounds.session_bound_install()  # before the first statement of this process
        _database_reachable()
        self.check()
        port = options["metrics_port"]
        if port is not None:
            if not 1 <= port <= 65535:
                raise CommandError(f"--metrics-port must lie in 1..65535 (got {port})")
            try:
                start_http_server(port, addr=options["metrics_addr"])
            except OSError as error:
                raise CommandError(
                    f"--metrics-port {port}: cannot listen on {options['metrics_addr']}: {error}"
                ) from error
            logger.info("metrics on http://%s:%s/metrics", options["metrics_addr"], port)
        sink = Router(sinks_build(concurrency=concurrency))
        sink.warm()
        poller = Poller(
            name=name,
            sink=sink,
            window=window,
            batch_size=batch_size,
            poll_interval=interval,
            sweep_every=conf.sweep_seconds(),
            host=socket.gethostname(),
            pid=os.getpid(),
            version="0.1.0",
        )
        try:
            poller.start()
        except PollerNameInUse as error:
            raise CommandError(str(error)) from error
        _install_signals(poller)
        # Threads that wake for I/O (webhook replies, the lease renewer) wait for the
        # GIL while the loop runs Python: hand it over within 1 ms, not the default 5.
        sys.setswitchinterval(_SWITCH_INTERVAL_SECONDS)
        if not options["once"]:  # a long run: what start-up built is never walked again
            gc_settle()
        poller.run(once=options["once"])


def _database_reachable() -> None:
    """Fail at start with a clear message when the database cannot be reached."""
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM polling_shardlease LIMIT 1")
    except DatabaseError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CommandError(
            f"database unreachable or not migrated ({type(error).__name__}: {first_line}); "
            "check DATABASE_URL and run `python manage.py migrate`"
        ) from error


def _option(value: Any, default: Any, flag: str, kind: type) -> Any:
    return kind(default if value is None else value)


def _install_signals(poller: Poller) -> None:
    """SIGTERM/SIGINT: stop claiming, finish the batch, release leases, exit 0.

    A watchdog bounds the wait: past SENDLATER_SHUTDOWN_GRACE_SECONDS the process
    exits with code 1 (its claims are returned by the shards' next owners).
    """
    grace = conf.shutdown_grace_seconds()

    def on_signal(signum: int, _frame: object) -> None:
        if poller.stopping.is_set():
            return
        signame = signal.Signals(signum).name
        logger.info("poller %s: %s received; finishing batch", poller.name, signame)
        poller.stop()
        watchdog = threading.Timer(grace, _force_exit, args=(poller.name, grace))
        watchdog.daemon = True
        watchdog.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _force_exit(name: str, grace: float) -> None:
    logger.error("poller %s: still busy %ss after the stop signal; exiting", name, grace)
    os._exit(1)
