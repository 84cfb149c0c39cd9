"""When a recurring schedule fires: cron (in a time zone) or a fixed interval. Pure.

No Django imports. Cron expressions are parsed and walked by ``cronsim`` in the
schedule's *local wall-clock time* (naive datetimes); this module alone turns each
local time into a UTC instant, with the DST rules of docs/schedules.md:

- a local time skipped by a spring-forward fires once, at the first valid instant
  after the gap (the transition itself: 02:30 on a New York spring-forward day
  fires at 03:00 EDT); several skipped times collapse into that one instant;
- a local time repeated by a fall-back fires once, at the earlier instant (fold=0);
- ``every_seconds`` counts real (UTC) seconds from its anchor; DST does not apply.

Every instant returned is timezone-aware UTC and strictly increasing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

MIN_EVERY_SECONDS = 5
CRON_FIELDS = 5
# cronsim may walk far for a rule that (almost) never matches (Feb 30): give up then.
MAX_CRON_STEPS = 10_000
# Longer than any DST gap (at most 2 hours in tzdata since 1970).
GAP_LOOKBACK = timedelta(hours=3)


class RecurrenceError(ValueError):
    """An invalid rule; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; RecurrenceError(field="timezone") if unknown."""
    if not isinstance(name, str) or not name or name != name.strip() or "\x00" in name:
        raise RecurrenceError("timezone must be an IANA time zone name.", field="timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise RecurrenceError(
            f"unknown time zone {name!r} (an IANA name such as Europe/London).", field="timezone"
        ) from error


def timezone_names() -> set[str]:
    return available_timezones()


def validate_cron(expression: str) -> None:
    """RecurrenceError(field="cron") unless ``expression`` is a 5-field cron expression."""
    if not isinstance(expression, str) or len(expression.split()) != CRON_FIELDS:
        raise RecurrenceError(
            "cron must have 5 fields: minute hour day-of-month month day-of-week.", field="cron"
        )
    try:
        CronSim(expression, datetime(2000, 1, 1))  # noqa: DTZ001 (local wall time)
    except (CronSimError, ValueError, KeyError, IndexError) as error:
        raise RecurrenceError(f"invalid cron expression: {error}.", field="cron") from error


@dataclass(frozen=True, slots=True)
class Rule:
    """One schedule's recurrence: ``cron`` in ``timezone``, or ``every_seconds`` from ``anchor``.

    ``start_at``/``end_at`` bound the instants (both inclusive; either may be None).
    """

    cron: str | None
    every_seconds: int | None
    timezone: str
    anchor: datetime  # every_seconds: anchor + k * every (k >= 0)
    start_at: datetime | None = None
    end_at: datetime | None = None

    def after(self, moment: datetime, *, inclusive: bool = True) -> Iterator[datetime]:
        """Instants at (``inclusive``) or after ``moment``, in order, within the bounds."""
        lower = moment if self.start_at is None else max(moment, self.start_at)
        if self.start_at is not None and self.start_at > moment:
            inclusive = True
        source = self._every(lower, inclusive) if self.cron is None else self._cron(lower)
        for instant in source:
            if not inclusive and instant <= lower:
                continue
            if inclusive and instant < lower:
                continue
            if self.end_at is not None and instant > self.end_at:
                return
            yield instant

    def between(self, first: datetime, last: datetime) -> Iterator[datetime]:
        """Instants in ``[first, last]``."""
        for instant in self.after(first):
            if instant > last:
                return
            yield instant

    def latest_before(self, moment: datetime) -> datetime | None:
        """The last instant strictly before ``moment`` (within the bounds), or None."""
        if self.start_at is not None and self.start_at >= moment:
            return None
        if self.cron is None:
            assert self.every_seconds is not None
            step = self.every_seconds
            k = (moment - self.anchor).total_seconds() // step
            if (moment - self.anchor).total_seconds() == k * step:
                k -= 1
            if k < 0:
                return None
            candidate = self.anchor + timedelta(seconds=int(k) * step)
        else:
            tz = zone(self.timezone)
            local = moment.astimezone(tz).replace(tzinfo=None)
            candidate = None
            # Walk back (cronsim reverse) and map; the mapped instant may be >= moment
            # (a skipped local time maps forward), so take the first strictly before it.
            walk = CronSim(self.cron, local + timedelta(minutes=1), reverse=True)
            for steps, naive in enumerate(walk):
                if steps > MAX_CRON_STEPS:
                    return None
                instant = to_utc(naive, tz)
                if instant < moment:
                    candidate = instant
                    break
            if candidate is None:
                return None
        if self.start_at is not None and candidate < self.start_at:
            return None
        if self.end_at is not None and candidate > self.end_at:
            return self.latest_before(self.end_at + timedelta(microseconds=1))
        return candidate

    def _every(self, lower: datetime, inclusive: bool) -> Iterator[datetime]:
        assert self.every_seconds is not None
        step = self.every_seconds
        elapsed = (lower - self.anchor).total_seconds()
        k = max(0, int(-(-elapsed // step)))  # ceil: the first instant >= lower
        while True:
            yield self.anchor + timedelta(seconds=k * step)
            k += 1

    def _cron(self, lower: datetime) -> Iterator[datetime]:
        assert self.cron is not None
        tz = zone(self.timezone)
        local = lower.astimezone(tz).replace(tzinfo=None)
        if tz.utcoffset(local - GAP_LOOKBACK) != tz.utcoffset(local):
            # A transition just before ``lower``: a local time in its gap maps forward
            # to the transition, which may be ``lower`` itself; start before the gap.
            local -= GAP_LOOKBACK
        previous: datetime | None = None
        steps = 0
        for naive in CronSim(self.cron, local - timedelta(microseconds=1)):
            steps += 1
            instant = to_utc(naive, tz)
            if previous is not None and instant <= previous:
                continue  # several skipped local times collapsed onto one instant
            previous = instant
            if instant >= lower:
                steps = 0
                yield instant
            elif steps > MAX_CRON_STEPS:
                return


def to_utc(local: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of naive local time ``local`` in ``tz``, by the DST rules above."""
    earlier = local.replace(tzinfo=tz, fold=0)
    instant = earlier.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) == local:
        return instant  # exists (fold=0 is the earlier of two, in a fall-back)
    # In a spring-forward gap: fold=0 maps with the offset before the transition, to
    # an instant after it; fold=1 with the one after, to an instant before it. The
    # transition (the first valid instant after the gap) lies between: bisect seconds.
    low = local.replace(tzinfo=tz, fold=1).astimezone(UTC)
    high = instant
    before = low.astimezone(tz).utcoffset()
    while (high - low) > timedelta(seconds=1):
        mid = low + (high - low) / 2
        mid = mid.replace(microsecond=0)
        if mid <= low:
            break
        if mid.astimezone(tz).utcoffset() == before:
            low = mid
        else:
            high = mid
    return high


def next_instants(rule: Rule, moment: datetime, count: int) -> list[datetime]:
    """The first ``count`` instants at or after ``moment``."""
    out: list[datetime] = []
    if count <= 0:
        return out
    for instant in rule.after(moment):
        out.append(instant)
        if len(out) >= count:
            break
    return out
