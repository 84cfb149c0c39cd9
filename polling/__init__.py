"""The pollers: they own shards, read due jobs, send them and write the outcomes back.

Packages, lowest first (each imports only lower ones; docs/architecture.md):
``common`` (SQL adapters, the database clock, failpoints), ``ownership`` (who owns
which shard), ``dispatch`` (where jobs are sent), ``flow`` and ``upkeep`` (flow
control at the read; partitions, retention, schedules), ``reading`` and ``writing``
(due jobs in, outcomes out), ``engine`` (the loop that ties them), then ``console``
and ``management`` (the operator's). The app's own modules (models, conf, metrics)
sit at the top of the folder and import none of the packages.
"""
