"""Each receiving host's concurrency as one budget for the whole service.

Every poller publishes, per host it has webhooks for (``polling.dispatch.hosts.host_key``),
a ``HostShare`` row: its *demand* (the host's jobs in its window) and its *share*
(how many it may have in flight to the host at once). A refresh (every
``REFRESH_SECONDS`` while the poller has webhooks, at once when a new host appears)
recomputes the poller's shares in one short transaction, serialized between pollers
by an advisory lock:

- the share follows the demand: ``cap * mine // all`` of the demands published in
  the last ``FRESH_SECONDS`` (at least 1 while the poller has any), so a poller with
  no jobs for a host takes none of it;
- it is taken only out of what the others' published shares leave free, so the
  shares of one host add up to at most its cap; a poller that grows waits until the
  others have shrunk (each at its own next refresh), and one that shrinks keeps
  publishing its old share for one refresh (``REFRESH_SECONDS``), while the requests
  started under it end;
- a poller that stops deletes its rows; one that dies stops counting after
  ``FRESH_SECONDS`` (its rows are purged after ``PURGE_SECONDS``).

With one poller the share is the whole cap. How fast a share moves: one refresh of
the poller that shrinks, then one of the poller that grows (docs/delivery.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from polling.common.sql import dt, fetch_all, is_postgres, placeholders, rowcount, values_rows
from polling.ownership.stall_bounds import (
    LOCK_BOUND_CTE,
    WindowBusy,
    bounded_atomic,
    lock_wait_param,
)

REFRESH_SECONDS = 0.5
FRESH_SECONDS = 5.0  # a row not refreshed for this long is a gone poller's
PURGE_SECONDS = 60.0
SHARES_LOCK_CLASS = 0x534C0002
SHARES_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s, 0)"
SHARES_LOCK_BOUNDED_SQL = LOCK_BOUND_CTE + "SELECT pg_advisory_xact_lock(%s, 0) FROM bound"

GONE_SQL = "DELETE FROM polling_hostshare WHERE owner = %s AND host IN ({hosts})"
UPSERT_SQL = """
INSERT INTO polling_hostshare (host, owner, demand, share, updated_at) VALUES {rows}
ON CONFLICT (host, owner) DO UPDATE
SET demand = excluded.demand, share = excluded.share, updated_at = excluded.updated_at
"""


def shares_refresh(
    *, owner: str, lanes: Mapping[str, tuple[int, int]], cap: int, now: datetime
) -> dict[str, int] | None:
    """Publish ``owner``'s demand per host and return its share of each.

    ``lanes``: ``{host: (demand, the share its transport has now)}`` for every host it
    has webhooks for (a host with no demand is given up). None when the lock was busy
    (a stopped poller holds it): keep the shares there are and try again at the next
    refresh.
    """
    hosts = [host for host, (demand, _) in lanes.items() if demand > 0]
    try:
        with bounded_atomic(lock_wait=True) as bounded:
            if bounded:
                fetch_all(SHARES_LOCK_BOUNDED_SQL, [lock_wait_param(), SHARES_LOCK_CLASS])
            elif is_postgres():
                fetch_all(SHARES_LOCK_SQL, [SHARES_LOCK_CLASS])
            mine = dict(
                fetch_all("SELECT host, share FROM polling_hostshare WHERE owner = %s", [owner])
            )
            others = _others(owner, hosts, now - timedelta(seconds=FRESH_SECONDS))
            shares: dict[str, int] = {}
            rows = []
            for host in hosts:
                demand, current = lanes[host]
                their_demand, their_share = others.get(host, (0, 0))
                target = max(1, cap * demand // (demand + their_demand))
                share = max(0, min(target, cap - their_share))
                shares[host] = share
                # Shrinking: what runs under the old share counts for one more refresh.
                published = max(share, min(mine.get(host, 0), current))
                rows.append((host, owner, demand, published, dt(now)))
            gone = [host for host in mine if host not in shares]
            if gone:
                rowcount(GONE_SQL.format(hosts=placeholders(len(gone))), [owner, *gone])
            if rows:
                sql, params = values_rows(rows)
                rowcount(UPSERT_SQL.format(rows=sql), params)
            rowcount(
                "DELETE FROM polling_hostshare WHERE updated_at < %s",
                [dt(now - timedelta(seconds=PURGE_SECONDS))],
            )
    except WindowBusy:
        return None
    return shares


def _others(owner: str, hosts: list[str], fresh_after: datetime) -> dict[str, tuple[int, int]]:
    """``{host: (demand, share)}`` summed over the other pollers' fresh rows."""
    if not hosts:
        return {}
    if is_postgres():
        where, params = "host = ANY(%s)", [hosts]
    else:
        where, params = f"host IN ({placeholders(len(hosts))})", list(hosts)
    rows = fetch_all(
        f"SELECT host, SUM(demand), SUM(share) FROM polling_hostshare"
        f" WHERE {where} AND owner <> %s AND updated_at > %s GROUP BY host",
        [*params, owner, dt(fresh_after)],
    )
    return {host: (int(demand), int(share)) for host, demand, share in rows}


def shares_release(*, owner: str) -> int:
    """Give up every share of ``owner`` (it stops, or dropped its window)."""
    return rowcount("DELETE FROM polling_hostshare WHERE owner = %s", [owner])
