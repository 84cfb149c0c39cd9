"""The job store and the scheduling API: what a team schedules, where it is kept.

Parts, lowest first (each imports only lower ones; docs/architecture.md): ``sharding``
(bucket and shard counts, cutovers, the clock), ``storage`` (partitions, bulk inserts,
row updates, failover), ``teams``, ``flow`` (flow-control limits), ``jobs`` (the job
services and reads), ``schedules`` (recurring schedules) and ``topics`` (a team's
topics and their endpoints), then ``api``, ``console``
(the jobs admin), ``tasks`` and ``management``. The base modules at the top
(``models``, ``choices``, ``keys``, ``conf``, ``errors``, ``netguard``, ``handlers``,
``metrics``) import none of the packages; ``scheduling`` never imports ``polling``.
"""
