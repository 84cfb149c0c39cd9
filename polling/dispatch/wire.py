"""What travels between a poller's process and its transport process
(``polling.dispatch.transport``, ``polling.dispatch.curlloop``), and how.

Both ways a message is a list of plain tuples, not of objects: the pipe pickles every
item, and a plain tuple of strings and numbers pickles and loads in C (about 0.3 us
an item), where a slotted dataclass or a named tuple costs a Python call on each side
(3.5 to 5 us an item, measured here), once per webhook each way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Outgoing(NamedTuple):
    """What the poller's process sends: one webhook to sign and deliver."""

    token: int  # the sender's key for the reply
    url: str
    msg_id: str
    body: bytes
    headers: list[str]  # besides the three signature headers
    secrets: list[str]
    timestamp: int  # webhook-timestamp, Unix seconds (the database's clock)
    # The job's delivery contract (``scheduling.jobs.requests``): its method (GET and
    # DELETE send no body) and its whole request's limit in seconds (0: the service's).
    method: str = "POST"
    timeout: float = 0.0


def outgoing_wire(batch: list[Outgoing]) -> list[tuple]:
    """``batch`` as plain tuples, for the pipe."""
    return [tuple(out) for out in batch]


@dataclass(slots=True)
class Reply:
    """What became of one request. ``status`` is None when no response arrived."""

    status: int | None = None
    retry_after: str | None = None  # the Retry-After header's seconds (None: none, or 0)
    excerpt: bytes = b""
    error: str = ""
    # "" | "timeout" | "network" | "blocked" | "host_open" | "host_held" | "truncated"
    kind: str = ""
    wait_hint: float | None = None  # seconds (host_open, host_held): when to try again
    started: float = 0.0  # monotonic, when the request left the host's queue
    finished: float = 0.0
    content_type: str = ""  # the response's Content-Type, as sent


def reply_wire(reply: Reply) -> tuple:
    """``reply`` as a plain tuple (``Reply(*fields)`` again on the other side)."""
    return (
        reply.status,
        reply.retry_after,
        reply.excerpt,
        reply.error,
        reply.kind,
        reply.wait_hint,
        reply.started,
        reply.finished,
        reply.content_type,
    )


def replies_read(batch: list[tuple[int, tuple]]) -> list[tuple[int, Reply]]:
    """A batch of ``(token, reply_wire(...))`` from the pipe, as Replies."""
    return [(token, Reply(*fields)) for token, fields in batch]
