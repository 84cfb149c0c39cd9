"""Stopping child processes politely: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence


def processes_stop(children: Sequence[subprocess.Popen[bytes]], *, grace_seconds: float) -> None:
    """SIGTERM every live child, wait up to ``grace_seconds`` in all, kill the rest."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
