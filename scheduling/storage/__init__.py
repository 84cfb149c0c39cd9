"""How job rows are stored: partitions and retention, bulk inserts (COPY), single-row
updates inside their partition, and the GC pause around large batches."""
