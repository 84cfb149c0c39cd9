"""Flow control at the read: which keyed jobs of a read may go now (``scheduling.flow``).

Every statement here runs inside the transaction of a read (``polling.reading.take``), after
the shard window lock and the read itself, so a key's grant commits together with the
batch that records its jobs in flight, or not at all.

Lock: the keys' ``FlowControl`` rows, ``FOR UPDATE`` in id order, until commit; the
API changes a key under the same row lock. Nothing takes a shard window lock while
holding a key row, so the orders cannot deadlock.

For the whole service, whatever the number of pollers:

- **rate**: the key's row holds ``tat``, the next free slot of a paced schedule
  (one delivery every ``period_seconds / rate``). A read takes the slots that fall
  within ``HORIZON_SECONDS`` of now, in due order, and moves ``tat`` past them; each
  job is sent at its slot (``ClaimedJob.send_at``). In any half-open interval of one
  period no more than ``rate`` deliveries start (a slot taken and not used is lost:
  the error is only ever fewer deliveries).
- **parallelism**: ``FlowSlot`` rows count each poller's deliveries in flight; a read
  takes a slot per job while the sum over live rows is below the limit, and the
  write-back gives it back (so a slot is held from before the request until after its
  outcome is written: the target never sees more than ``parallelism`` at once).
- **pause**: nothing is taken; the jobs stay pending.

A job past its ``expires_at`` goes through untouched: it is written expired, never sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from polling.common.sql import dt, fetch_all, is_postgres, placeholders, rowcount, to_dt

HORIZON_SECONDS = 1.0  # how far ahead of now a read takes rate slots
FlowKey = tuple[int, str]  # (team id, flow_control_key)


@dataclass(slots=True)
class _Flow:
    id: int
    rate: int | None
    period: float
    parallelism: int | None
    paused: bool
    tat: datetime | None
    window_start: datetime | None
    window_count: int
    in_flight: int = 0
    granted: int = 0
    next_slot: datetime | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a key's jobs wait, and from when (database time) a rate slot is free again."""

    reason: str  # new (not yet read on its own) | paused | rate | parallelism
    retry_at: datetime | None = None
    gap: float = 0.0  # rate: seconds between the key's slots
    limit: int = 0  # parallelism: the key's limit


# A granted row's key (its FlowControl id, whose slot it holds), its rate slot and
# the seconds between the key's slots.
Grant = tuple[int, datetime | None, float]


FLOWS_SQL = """
SELECT id, team_id, key, rate, period_seconds, parallelism, paused, tat, window_start,
    window_count
FROM scheduling_flowcontrol WHERE {match} ORDER BY id{lock}"""

SLOTS_SQL = """
SELECT flow_id, SUM(slots) FROM scheduling_flowslot
WHERE flow_id IN ({ids}) AND expires_at > %s AND slots > 0 GROUP BY flow_id"""

FLOW_DRAWN_SQL = """
UPDATE scheduling_flowcontrol SET tat = %s, window_start = %s, window_count = %s WHERE id = %s"""

SLOT_TAKE_SQL = """
INSERT INTO scheduling_flowslot (flow_id, poller, slots, expires_at) VALUES (%s, %s, %s, %s)
ON CONFLICT (flow_id, poller) DO UPDATE
SET slots = scheduling_flowslot.slots + EXCLUDED.slots, expires_at = EXCLUDED.expires_at"""

SLOT_GIVE_SQL = """
UPDATE scheduling_flowslot SET slots = CASE WHEN slots > %s THEN slots - %s ELSE 0 END
WHERE flow_id = %s AND poller = %s"""

SLOTS_RENEW_SQL = "UPDATE scheduling_flowslot SET expires_at = %s WHERE poller = %s"
SLOTS_RESET_SQL = "DELETE FROM scheduling_flowslot WHERE poller = %s"
SLOTS_START_SQL = "DELETE FROM scheduling_flowslot WHERE poller = %s OR expires_at < %s"


def _flows_locked(keys: Sequence[FlowKey], *, lock: bool = True) -> dict[FlowKey, _Flow]:
    """The limits of ``keys`` that have any (row-locked with ``lock``)."""
    if is_postgres():
        match = "(team_id, key) IN (" + ", ".join(["(%s, %s)"] * len(keys)) + ")"
        lock_sql = " FOR UPDATE" if lock else ""
    else:  # IMMEDIATE transactions already serialise SQLite's writers
        match = " OR ".join(["(team_id = %s AND key = %s)"] * len(keys))
        lock_sql = ""
    params = [v for pair in keys for v in pair]
    flows = {
        (int(team), str(key)): _Flow(
            id=int(fid),
            rate=rate,
            period=float(period),
            parallelism=parallelism,
            paused=bool(paused),
            tat=to_dt(tat),
            window_start=to_dt(ws),
            window_count=int(wc),
        )
        for fid, team, key, rate, period, parallelism, paused, tat, ws, wc in fetch_all(
            FLOWS_SQL.format(match=match, lock=lock_sql), params
        )
    }
    return flows


def admit(
    rows: Sequence[tuple[Any, ...]],
    *,
    owner: str,
    now: datetime,
    slots_until: datetime,
    team_at: int = 1,
    expires_at: int = 8,
    key_at: int = 11,
    defer_limited: bool = False,
) -> tuple[list[tuple[Any, ...]], dict[Any, Grant], dict[FlowKey, Hold]]:
    """Split a read's ``rows`` (due order) into those that go now and the keys held back.

    Returns the rows that go, the grants of limited keys' rows by id (``row[0]``),
    and the keys held back with why.

    A key that holds stops at its first job that cannot go: its later jobs wait too,
    so each key's jobs start in due order. Rows of keys without limits, rows without
    a key and expired rows all go. ``slots_until``: the expiry of the parallelism
    slots taken (the poller's lease). Call inside the read's transaction.

    ``defer_limited`` (a shard read): hold every key that has limits, unread, as
    ``Hold("new")``; its jobs are then taken by a key read, which sees them on all the
    reader's shards at once and so starts them in due order across shards.
    """
    keys = list(
        dict.fromkeys(
            (r[team_at], r[key_at])
            for r in rows
            if r[key_at] is not None and not _expired(r[expires_at], now)
        )
    )
    if not keys:
        return list(rows), {}, {}
    flows = _flows_locked(keys, lock=not defer_limited)
    if defer_limited:  # a row without limits (a resumed pause-only key) limits nothing
        flows = {k: f for k, f in flows.items() if f.paused or f.rate or f.parallelism}
    if not flows:
        return list(rows), {}, {}
    if defer_limited:
        kept = [
            r
            for r in rows
            if r[key_at] is None
            or (r[team_at], r[key_at]) not in flows
            or _expired(r[expires_at], now)
        ]
        return kept, {}, {key: Hold("new") for key in flows}
    _count_in_flight(flows, now)
    horizon = now + timedelta(seconds=HORIZON_SECONDS)
    admitted: list[tuple[Any, ...]] = []
    grants: dict[Any, Grant] = {}
    holds: dict[FlowKey, Hold] = {}
    for row in rows:
        key = (row[team_at], row[key_at])
        flow = flows.get(key) if row[key_at] is not None else None
        if flow is None or _expired(row[expires_at], now):
            admitted.append(row)
            continue
        if key in holds:
            continue
        hold = _hold(flow, now, horizon)
        if hold is not None:
            holds[key] = hold
            continue
        send_at, gap = None, 0.0
        if flow.rate:
            send_at, gap = flow.next_slot, flow.period / flow.rate
            flow.next_slot = send_at + timedelta(seconds=gap)  # type: ignore[operator]
        flow.granted += 1
        admitted.append(row)
        grants[row[0]] = (flow.id, send_at, gap)
    for key, flow in flows.items():
        if flow.rate and flow.granted and key not in holds and flow.next_slot is not None:
            # Its slots up to now are taken: the next chunk comes with time.
            retry_at = flow.next_slot - timedelta(seconds=HORIZON_SECONDS)
            holds[key] = Hold("rate", retry_at, gap=flow.period / flow.rate)
    _record(flows.values(), owner=owner, now=now, slots_until=slots_until)
    return admitted, grants, holds


def _expired(value: Any, now: datetime) -> bool:
    if value is None:
        return False
    return (to_dt(value) or now) <= now


def _count_in_flight(flows: dict[FlowKey, _Flow], now: datetime) -> None:
    bounded = {f.id: f for f in flows.values() if f.parallelism is not None}
    if not bounded:
        return
    ids = sorted(bounded)
    for fid, total in fetch_all(SLOTS_SQL.format(ids=placeholders(len(ids))), [*ids, dt(now)]):
        bounded[int(fid)].in_flight = int(total or 0)


def _hold(flow: _Flow, now: datetime, horizon: datetime) -> Hold | None:
    """Why ``flow``'s next job cannot go now (None: it can)."""
    if flow.paused:
        return Hold("paused")
    if flow.parallelism is not None and flow.in_flight + flow.granted >= flow.parallelism:
        return Hold("parallelism", limit=flow.parallelism)
    if flow.rate:
        if flow.next_slot is None:
            flow.next_slot = max(flow.tat or now, now)
        if flow.next_slot > horizon:
            retry_at = flow.next_slot - timedelta(seconds=HORIZON_SECONDS)
            return Hold("rate", retry_at, gap=flow.period / flow.rate)
    return None


def _record(flows: Iterable[_Flow], *, owner: str, now: datetime, slots_until: datetime) -> None:
    """Write what the read took: each key's next slot, period count and in-flight slots."""
    for flow in flows:
        if not flow.granted:
            continue
        period = timedelta(seconds=flow.period)
        if flow.window_start is None or now >= flow.window_start + period:
            window_start, window_count = now, flow.granted
        else:
            window_start, window_count = flow.window_start, flow.window_count + flow.granted
        tat = flow.next_slot if flow.rate else flow.tat
        rowcount(FLOW_DRAWN_SQL, [dt(tat), dt(window_start), window_count, flow.id])
        rowcount(SLOT_TAKE_SQL, [flow.id, owner, flow.granted, dt(slots_until)])


def slots_give(*, owner: str, counts: dict[int, int]) -> None:
    """Give back ``counts`` slots per FlowControl id (jobs written back). In the
    write-back's transaction, so a slot is free only once its outcome is written."""
    for flow_id, count in sorted(counts.items()):
        if count:
            rowcount(SLOT_GIVE_SQL, [count, count, flow_id, owner])


def slots_renew(*, owner: str, until: datetime) -> int:
    """Keep ``owner``'s slots counting until ``until`` (with its leases)."""
    return rowcount(SLOTS_RENEW_SQL, [dt(until), owner])


def slots_reset(*, owner: str, expired_before: datetime | None = None) -> int:
    """Forget every slot of ``owner`` (after it dropped its window); at start also the
    rows of pollers gone since ``expired_before`` (they no longer count anyway)."""
    if expired_before is None:
        return rowcount(SLOTS_RESET_SQL, [owner])
    return rowcount(SLOTS_START_SQL, [owner, dt(expired_before)])
