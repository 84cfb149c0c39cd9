"""How job rows are stored: partitions and retention, bulk inserts (COPY), single-row
updates inside their partition, the GC pause around large batches, and what a lost or
demoted primary looks like (``failover``). Imports ``sharding`` and the base modules."""
