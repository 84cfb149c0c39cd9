"""One-shot jobs: what a client asks for (``specs``), the writes (``services``: schedule,
cancel, reschedule; ``cancels`` in bulk; ``deadletters``: requeue), idempotency keys,
the reads (``selectors``) and jobs in flight (``inflight``: the lock order shared with
the pollers). Imports ``sharding``, ``storage``, ``flow`` and the base modules."""
