"""A changelist paginator that estimates large counts instead of counting rows.

``COUNT(*)`` over ten million jobs reads them all. On PostgreSQL the planner
already knows roughly how many rows a query returns: the unfiltered table's
``pg_class.reltuples`` (summed over partitions when the table is partitioned)
or the row estimate of ``EXPLAIN`` for a filtered one. Small results are still
counted exactly, so a narrow search shows the true figure.
"""

from __future__ import annotations

import json
from functools import cached_property

from django.core.paginator import Paginator
from django.db import connections

# Below this estimate the exact count is cheap enough to run.
EXACT_COUNT_BELOW = 10_000

RELTUPLES_SQL = """
SELECT COALESCE(SUM(GREATEST(c.reltuples, 0)), 0)::bigint FROM pg_class c
WHERE c.oid = %s::regclass
   OR c.oid IN (SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = %s::regclass)
"""


def estimate_count(queryset) -> int | None:  # type: ignore[no-untyped-def]
    """The planner's row estimate for ``queryset`` on PostgreSQL; None elsewhere."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        if not queryset.query.where:
            table = queryset.model._meta.db_table
            cursor.execute(RELTUPLES_SQL, [table, table])
            estimate = int(cursor.fetchone()[0])
            if estimate > 0:
                return estimate
        sql, params = queryset.order_by().query.sql_with_params()
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """Exact counts for small results, the planner's estimate for large ones."""

    @cached_property
    def count(self) -> int:
        estimate = estimate_count(self.object_list)
        if estimate is None or estimate < EXACT_COUNT_BELOW:
            return super().count
        return estimate
