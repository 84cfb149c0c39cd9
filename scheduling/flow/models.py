"""The rows behind flow control: a key's limits and live counters, and who holds slots."""

from __future__ import annotations

from django.db import models


class FlowControl(models.Model):
    """A team's limits for one ``flow_control_key``, and the counters pollers draw from.

    ``rate`` deliveries per ``period_seconds`` are paced: each delivery takes the slot
    ``tat`` (the next free instant of the key's schedule) and moves it on by
    ``period_seconds / rate``. ``parallelism`` bounds the requests in flight at once
    across all pollers (``FlowSlot``). A paused key delivers nothing; its jobs stay
    pending. ``window_start``/``window_count``: deliveries started in the current period.
    """

    team = models.ForeignKey("scheduling.Team", on_delete=models.CASCADE, related_name="flows")
    key = models.CharField(max_length=100)
    rate = models.PositiveIntegerField(null=True, blank=True)  # None: no rate limit
    period_seconds = models.PositiveIntegerField(default=1)
    parallelism = models.PositiveIntegerField(null=True, blank=True)  # None: unbounded
    paused = models.BooleanField(default=False)
    # The next free rate slot (database time); None: never drawn.
    tat = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "key"], name="flowcontrol_team_key_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}:{self.key}"


class FlowSlot(models.Model):
    """Deliveries of a key one poller has in flight (parallelism across pollers).

    A poller adds to its row when it hands the key's jobs to its sinks and takes
    them off at their write-back. ``expires_at`` moves with the poller's leases: the
    slots of a poller that died stop counting when it expires.
    """

    flow = models.ForeignKey(FlowControl, on_delete=models.CASCADE, related_name="slots")
    poller = models.CharField(max_length=200)
    slots = models.IntegerField(default=0)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["flow", "poller"], name="flowslot_flow_poller_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.flow_id}@{self.poller}: {self.slots}"
