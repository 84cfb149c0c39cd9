"""Console pages: lag dashboard, pollers, reshard cutovers (wrapped by ``admin_view``)."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from polling.console import charts
from polling.console.audit import audit
from polling.console.cutover import cutover_preview, schedule_list
from polling.console.dashboard import SORT_KEYS, ShardRow, dashboard_build
from polling.console.permissions import can_cutover, can_move, can_view
from polling.models import Poller, PollerState, ShardLease
from scheduling import conf as scheduling_conf
from scheduling import keys
from scheduling.errors import InvalidCutover
from scheduling.sharding.clock import db_now
from scheduling.sharding.cutovers import cutover_earliest, cutover_schedule

COLUMNS = [
    ("shard", "Shard"),
    ("owner", "Owner"),
    ("epoch", "Epoch"),
    ("checkpoint", "Checkpoint"),
    ("lag", "Lag (s)"),
    ("backlog", "Due backlog"),
    ("oldest", "Oldest due (s)"),
    ("in_flight", "In flight"),
    ("held", "Held"),
    ("delivered", "Delivered last min"),
]
HELD_KEYS_SHOWN = 20  # the flow-control page lists them all


def _context(request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
    return {**admin.site.each_context(request), "title": title, "subtitle": None, **extra}


def _require_view(request: HttpRequest) -> None:
    if not can_view(request.user):
        raise PermissionDenied


def _display(row: ShardRow) -> dict[str, Any]:
    """A shard row as ready-made strings: 256 rows of template number formatting
    (localize, floatformat) cost more than every query of the page together.
    """
    oldest = row.oldest_due_age_seconds
    return {
        "shard": str(row.shard),
        "lease_id": str(row.lease_id),
        "owner": row.owner or "—",
        "epoch": str(row.epoch),
        "checkpoint": row.checkpoint.strftime("%H:%M") if row.checkpoint else "—",
        "lag": f"{row.lag_seconds:.1f}",
        "backlog": str(row.due_backlog),
        "oldest": f"{oldest:.0f}" if oldest is not None else "—",
        "in_flight": str(row.in_flight),
        "held": str(row.held),
        "delivered": str(row.delivered_last_minute),
        "expires": row.expires_at.strftime("%H:%M:%S") if row.expires_at else "—",
        "pin": row.pinned_to or "",
        "over": row.over_threshold,
    }


def dashboard_view(request: HttpRequest) -> HttpResponse:
    """One row per shard, a summary, and SVG charts; reloads itself every few seconds."""
    _require_view(request)
    if request.method != "GET":
        raise PermissionDenied
    sort = request.GET.get("o", "shard")
    if sort.removeprefix("-") not in SORT_KEYS:
        sort = "shard"
    threshold = float(settings.SENDLATER_LAG_THRESHOLD_SECONDS)
    data = dashboard_build(now=db_now(), threshold_seconds=threshold, sort=sort)
    by_shard = sorted(data.rows, key=lambda r: r.shard)
    columns = [
        (key, label, f"-{key}" if sort == key else key, sort.removeprefix("-") == key)
        for key, label in COLUMNS
    ]
    return TemplateResponse(
        request,
        "admin/console/dashboard.html",
        _context(
            request,
            "Lag dashboard",
            data=data,
            rows=[_display(r) for r in data.rows],
            held_keys=[
                {
                    "team": k.team,
                    "key": k.key,
                    "reason": k.reason,
                    "jobs": k.jobs,
                    "oldest_age": f"{(data.now - k.oldest).total_seconds():.0f}"
                    if k.oldest
                    else "—",
                    "shards": k.shards,
                }
                for k in data.held_keys[:HELD_KEYS_SHOWN]
            ],
            held_keys_rest=max(0, len(data.held_keys) - HELD_KEYS_SHOWN),
            columns=columns,
            sort=sort,
            can_move=can_move(request.user),
            refresh_seconds=int(settings.SENDLATER_DASHBOARD_REFRESH_SECONDS),
            lag_chart=charts.lag_bars(
                [(r.shard, r.lag_seconds) for r in by_shard], threshold=threshold
            ),
            delivered_chart=charts.time_series(
                data.series.minutes,
                data.series.delivered,
                label="Delivered / minute",
                element_id="delivered-chart",
            ),
            backlog_chart=charts.time_series(
                data.series.minutes,
                data.series.backlog,
                label="Due backlog",
                element_id="backlog-chart",
            ),
            lease_changelist=reverse("admin:polling_shardlease_changelist"),
        ),
    )


def pollers_view(request: HttpRequest) -> HttpResponse:
    """Each poller: heartbeat age, state, owned shards, version; standby and stale warnings."""
    _require_view(request)
    now = db_now()
    lease_seconds = scheduling_conf.lease_seconds()
    owned: dict[str, list[int]] = defaultdict(list)
    for shard, owner in ShardLease.objects.filter(
        owner__isnull=False, expires_at__gt=now
    ).values_list("shard", "owner"):
        owned[owner].append(shard)
    shard_total = ShardLease.objects.count()
    rows, warnings = [], []
    for poller in Poller.objects.order_by("name"):
        age = (now - poller.heartbeat_at).total_seconds()
        alive = age < lease_seconds
        shards = sorted(owned.get(poller.name, []))
        stale = poller.state != PollerState.STOPPED and not alive
        standby = alive and poller.state == PollerState.ACTIVE and not shards
        if stale:
            warnings.append(
                f"Poller {poller.name}: heartbeat {age:.0f} s old (lease {lease_seconds} s); "
                "its leases expire and other pollers take its shards."
            )
        rows.append(
            {
                "poller": poller,
                "age": age,
                "alive": alive,
                "stale": stale,
                "standby": standby,
                "shards": shards,
            }
        )
    active_alive = sum(1 for r in rows if r["alive"] and r["poller"].state == PollerState.ACTIVE)
    if shard_total and active_alive > shard_total:
        warnings.append(
            f"{active_alive} live pollers for {shard_total} shards: "
            f"{active_alive - shard_total} are standbys (schedule a cutover to add shards)."
        )
    standbys = [r["poller"].name for r in rows if r["standby"]]
    if standbys and active_alive <= shard_total:
        warnings.append(f"Standby (owning no shard): {', '.join(standbys)}.")
    return TemplateResponse(
        request,
        "admin/console/pollers.html",
        _context(
            request,
            "Pollers",
            rows=rows,
            warnings=warnings,
            can_move=can_move(request.user),
            poller_changelist=reverse("admin:polling_poller_changelist"),
        ),
    )


class CutoverForm(forms.Form):
    shard_count = forms.IntegerField(min_value=1, label="New shard count")
    effective_from = forms.DateTimeField(
        label="Effective from (UTC bucket boundary)",
        help_text="ISO 8601, e.g. 2027-01-01T00:00Z.",
    )
    reason = forms.CharField(max_length=400, widget=forms.TextInput(attrs={"size": 60}))

    def __init__(self, *args: Any, now: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now
        # The ceiling is a setting read at request time, so it is checked in clean.
        self.fields["shard_count"].widget.attrs["max"] = scheduling_conf.max_shards()

    def clean_shard_count(self) -> int:
        value = self.cleaned_data["shard_count"]
        ceiling = scheduling_conf.max_shards()
        if value > ceiling:
            raise forms.ValidationError(
                f"Ensure this value is less than or equal to {ceiling} (SENDLATER_MAX_SHARDS)."
            )
        return value

    def clean_effective_from(self) -> Any:
        value = self.cleaned_data["effective_from"]
        width = scheduling_conf.bucket_seconds()
        if not keys.is_bucket_start(value, width):
            raise forms.ValidationError(f"Must be a bucket boundary (a multiple of {width} s).")
        earliest = cutover_earliest(self.now)
        if value < earliest:
            raise forms.ValidationError(
                f"Must be at or after {earliest.isoformat()} (open bucket plus the margin)."
            )
        return value


def cutovers_view(request: HttpRequest) -> HttpResponse:
    """The schedule of cutovers; with ``schedule_cutover``, a form, a preview, a confirm."""
    _require_view(request)
    now = db_now()
    allowed = can_cutover(request.user)
    if request.method == "POST" and not allowed:
        raise PermissionDenied
    form, preview = None, None
    if allowed:
        earliest = cutover_earliest(now)
        initial = {"effective_from": timezone.localtime(earliest).strftime("%Y-%m-%dT%H:%M")}
        form = CutoverForm(
            request.POST if request.method == "POST" else None, initial=initial, now=now
        )
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            if request.POST.get("confirm") == "yes":
                try:
                    row = cutover_schedule(
                        shard_count=data["shard_count"],
                        effective_from=data["effective_from"],
                        reason=data["reason"],
                    )
                except InvalidCutover as error:
                    form.add_error(None, error.message)
                else:
                    audit(
                        user=request.user,
                        obj=row,
                        action=f"Scheduled {row.shard_count} shards from "
                        f"{row.effective_from.isoformat()}.",
                        reason=data["reason"],
                    )
                    messages.success(
                        request,
                        f"Cutover scheduled: {row.shard_count} shards from "
                        f"{row.effective_from.isoformat()}.",
                    )
                    return HttpResponseRedirect(reverse("console-cutovers"))
            else:
                preview = cutover_preview(
                    shard_count=data["shard_count"], effective_from=data["effective_from"], now=now
                )
    return TemplateResponse(
        request,
        "admin/console/cutovers.html",
        _context(
            request,
            "Reshard cutovers",
            form=form,
            preview=preview,
            can_cutover=allowed,
            schedule=schedule_list(now=now),
            earliest=cutover_earliest(now),
            now=now,
            lease_seconds=timedelta(seconds=scheduling_conf.lease_seconds()),
        ),
    )
