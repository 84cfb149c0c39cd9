"""Flow control: rate and parallelism limits per key, and pause/resume (docs/delivery.md).

A job, bulk item or schedule may name a ``flow_control_key``; a team sets limits on
its keys (``FlowControl``). The pollers enforce them for the whole service through
the key's row: rate tokens are drawn from it (``tat``, the next free slot of a
paced schedule) and deliveries in flight are counted in ``FlowSlot`` rows, one per
poller holding some. ``polling.flow.gate`` is the pollers' side.
"""
