"""Routes each claimed job to the sink for its ``target_kind`` (SENDLATER_SINKS)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from polling import conf
from polling.dispatch.base import ClaimedJob, Outcome, Sink, answered_in_order

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
    """A sink over sinks: splits a batch by target kind and merges the outcomes.

    A job whose kind has no sink, or that a sink failed to answer for, is retried
    with a clear ``error``: never dropped.
    """

    def __init__(self, sinks: dict[str, Sink]) -> None:
        self._sinks = sinks

    def deliver(self, jobs: Sequence[ClaimedJob]) -> list[Outcome]:
        by_kind: dict[str, list[ClaimedJob]] = defaultdict(list)
        for job in jobs:
            by_kind[job.target_kind].append(job)
        if len(by_kind) == 1:  # the usual batch: one kind, answered in its order
            return self._deliver_group(*next(iter(by_kind.items())))
        outcomes: dict[object, Outcome] = {}
        for kind, group in by_kind.items():
            outcomes.update((o.job_id, o) for o in self._deliver_group(kind, group))
        return [outcomes[job.id] for job in jobs]

    def _deliver_group(self, kind: str, group: list[ClaimedJob]) -> list[Outcome]:
        """One outcome per job of ``group`` (one target kind), in its order."""
        sink = self._sinks.get(kind)
        if sink is None:
            error = f"no sink for target kind {kind!r} (SENDLATER_SINKS)"
            logger.error("%s: retrying %s jobs", error, len(group))
            return [Outcome(j.id, "retry", error=error) for j in group]
        try:
            answered = sink.deliver(group)
        except Exception as error:
            logger.exception("sink %s failed on a batch of %s jobs", kind, len(group))
            reason = f"sink {kind!r} failed: {type(error).__name__}: {error}"
            return [Outcome(j.id, "retry", error=reason) for j in group]
        if answered_in_order(group, answered):
            return list(answered)
        by_id = {o.job_id: o for o in answered}
        reason = f"sink {kind!r} returned no outcome"
        return [by_id.get(j.id) or Outcome(j.id, "retry", error=reason) for j in group]

    def close(self) -> None:
        for sink in self._sinks.values():
            sink.close()
