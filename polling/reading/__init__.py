"""Where due jobs are read: each shard's frontier and checkpoint (``checkpoints``),
the locking reads that take jobs into flight (``take``), read cursors past what is
in flight (``cursors``), a poller's shard reads (``shard_reads``) and held-key reads
(``held_keys``), and per-shard lag (``lag``) with the jobs flow control holds
(``held_backlog``). Imports ``common``, ``ownership``,
``dispatch`` and ``flow``."""
