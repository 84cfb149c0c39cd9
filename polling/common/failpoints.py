"""Failpoints: named places where a fault test can make a poller crash or stall.

Off unless ``SENDLATER_FAILPOINTS`` is set (fault tests set it for the processes
they start), e.g. ``after_dispatch=exit`` or ``after_dispatch=sleep:5,before_claim=exit``.

- ``exit``: ``os._exit(137)`` at once, like kill -9: no cleanup, no write-back;
- ``sleep:N``: stall N seconds (a pause past the lease);
- ``stop``: SIGSTOP this process, every thread of it, where it stands (the test
  sends SIGCONT);
- ``once-exit``, ``once-sleep:N``, ``once-stop``: only the first time in this process.
"""

from __future__ import annotations

import logging
import os
import signal
import time

logger = logging.getLogger(__name__)

_fired: set[str] = set()


def _actions() -> dict[str, str]:
    spec = os.environ.get("SENDLATER_FAILPOINTS", "")
    actions = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        actions[name.strip()] = action.strip()
    return actions


def failpoint(name: str) -> None:
    """Do what ``SENDLATER_FAILPOINTS`` says for ``name``; nothing when unset."""
    if "SENDLATER_FAILPOINTS" not in os.environ:
        return
    action = _actions().get(name)
    if not action:
        return
    logger.warning("failpoint %s: %s", name, action)
    if action == "exit" or (action == "once-exit" and name not in _fired):
        _fired.add(name)
        os._exit(137)
    if action.startswith("sleep:") or (action.startswith("once-sleep:") and name not in _fired):
        _fired.add(name)
        time.sleep(float(action.split(":", 1)[1]))
    if action == "stop" or (action == "once-stop" and name not in _fired):
        _fired.add(name)
        os.kill(os.getpid(), signal.SIGSTOP)
