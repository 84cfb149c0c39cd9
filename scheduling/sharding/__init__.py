"""Where a job lives beyond its key: each bucket's recorded shard count (``buckets``),
cutovers of the shard count (``cutovers``), the database clock and the open bucket
(``clock``), capacity arithmetic (``sizing``). The pure arithmetic is ``scheduling.keys``.
Imports only the base modules."""
