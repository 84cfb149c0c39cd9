"""Routes each job read to the sink for its ``target_kind`` (SENDLATER_SINKS)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from polling import conf
from polling.dispatch.base import (
    ClaimedJob,
    Done,
    Outcome,
    Sink,
    answered_in_order,
    deliver_all,
    is_pipelined,
)
from polling.dispatch.topics import TopicSink

logger = logging.getLogger(__name__)


def sinks_build(*, concurrency: int, paths: dict[str, str] | None = None) -> dict[str, Sink]:
    """Instantiate one sink per target kind from dotted class paths."""
    built: dict[str, Sink] = {}
    for kind, path in (paths if paths is not None else conf.sinks()).items():
        try:
            cls = import_string(path)
        except ImportError as error:
            raise ImproperlyConfigured(f"SENDLATER_SINKS[{kind!r}]: {error}") from error
        built[kind] = cls(concurrency=concurrency)
    return built


class Router:
    """A sink over sinks: splits jobs by target kind; each outcome is reported as it ends.

    A job whose kind has no sink, or that a sink failed to answer for, is retried
    with a clear ``error``: never dropped. Simple sinks (``deliver`` only) answer
    their group inline, on the submitting thread. Topic jobs go to ``TopicSink`` unless
    ``sinks`` names another for them: their fan-out is the write-back's.
    """

    def __init__(self, sinks: dict[str, Sink]) -> None:
        self._sinks = {"topic": TopicSink(), **sinks}

    def submit(self, jobs: Sequence[ClaimedJob], done: Done) -> None:
        by_kind: dict[str, list[ClaimedJob]] = defaultdict(list)
        for job in jobs:
            by_kind[job.target_kind].append(job)
        for kind, group in by_kind.items():
            self._submit_group(kind, group, done)

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        return deliver_all(self, jobs)

    def _submit_group(self, kind: str, group: list[ClaimedJob], done: Done) -> None:
        sink = self._sinks.get(kind)
        if sink is None:
            error = f"no sink for target kind {kind!r} (SENDLATER_SINKS)"
            logger.error("%s: retrying %s jobs", error, len(group))
            for job in group:
                done(job, Outcome(job.id, "retry", error=error))
            return
        try:
            if is_pipelined(sink):
                sink.submit(group, done)  # type: ignore[attr-defined]
                return
            answered = sink.deliver(group)
        except Exception as error:
            logger.exception("sink %s failed on %s jobs", kind, len(group))
            reason = f"sink {kind!r} failed: {type(error).__name__}: {error}"
            for job in group:
                done(job, Outcome(job.id, "retry", error=reason))
            return
        if answered_in_order(group, answered):
            for job, outcome in zip(group, answered, strict=True):
                done(job, outcome)
            return
        by_id = {o.job_id: o for o in answered}
        reason = f"sink {kind!r} returned no outcome"
        for job in group:
            done(job, by_id.get(job.id) or Outcome(job.id, "retry", error=reason))

    def host_caps(self, caps: dict[str, int]) -> None:
        """Pass each host's cap (``polling.flow.host_lanes``) to the sinks that send
        to hosts."""
        for sink in self._sinks.values():
            apply = getattr(sink, "host_caps", None)
            if callable(apply):
                apply(caps)

    def warm(self) -> None:
        """Let each sink that starts something (a process) start it now."""
        for sink in self._sinks.values():
            warm = getattr(sink, "warm", None)
            if callable(warm):
                warm()

    def close(self) -> None:
        for sink in self._sinks.values():
            sink.close()
