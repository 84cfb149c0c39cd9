"""The sweep: pending rows written behind a shard's checkpoint move to the open bucket.

Such rows come from writes that committed after the poller had closed and passed
their bucket (DESIGN.md, "Late writes"). Fenced on the old shard's lease
(``polling.reading.take.sweep_find`` / ``sweep_move``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from polling import metrics
from polling.ownership.stall_bounds import bounded_atomic
from polling.reading import take as claims
from scheduling import keys
from scheduling.buckets import shard_counts_record

logger = logging.getLogger(__name__)

SWEEP_BATCH_ROWS = 1000


def sweep_stranded(*, owner: str, now: datetime, width: int) -> int:
    """Move up to SWEEP_BATCH_ROWS stranded rows of ``owner``'s shards; return how many."""
    stranded = claims.sweep_find(owner=owner, now=now, limit=SWEEP_BATCH_ROWS)
    if not stranded:
        return 0
    open_bucket = keys.bucket_of(now, width)
    with bounded_atomic():
        count = shard_counts_record([open_bucket])[open_bucket]
        moves = [
            (job_id, bucket, shard, epoch, open_bucket, keys.shard_of(job_id, count))
            for job_id, shard, bucket, epoch in stranded
        ]
        moved = max(claims.sweep_move(owner=owner, moves=moves, now=now), 0)
    # SQLite reports -1 rows for a statement that starts with WITH (hence the max).
    metrics.SWEEP_MOVED.inc(moved)
    logger.warning(
        "poller %s: swept %s late-written rows into bucket %s",
        owner,
        moved,
        open_bucket.isoformat(),
    )
    return moved
