"""Ownership moves as admin actions, in the shape of Django's ``delete_selected``.

Each action first renders a confirmation page asking for a reason (and, for a
pin, the target poller); the confirmed POST calls ``polling.ownership.registration`` once per
object, writes a LogEntry with the reason, and returns to the dashboard. Nothing
here updates a lease row itself: the fenced statements in ``polling.reading.take`` do.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from polling.console.audit import audit
from polling.console.permissions import can_move
from polling.models import Poller, PollerState, ShardLease
from polling.ownership import registration
from scheduling import conf as scheduling_conf
from scheduling.sharding.clock import db_now

MOVE_ACTIONS = {"pin_shards", "unpin_shards", "release_leases", "drain_pollers", "resume_pollers"}


class ConfirmForm(forms.Form):
    reason = forms.CharField(
        max_length=400,
        strip=True,
        help_text="Why: kept with the audit entry.",
        widget=forms.TextInput(attrs={"size": 60}),
    )

    def __init__(self, *args: Any, pollers: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if pollers is not None:
            self.fields["poller"] = forms.ChoiceField(
                choices=[(name, name) for name in pollers],
                label="Move to poller",
                help_text="Live pollers only: a pin to a dead poller would be ignored.",
            )


def live_poller_names() -> list[str]:
    """Active pollers whose heartbeat is younger than one lease."""
    since = db_now() - timedelta(seconds=scheduling_conf.lease_seconds())
    return list(
        Poller.objects.filter(state=PollerState.ACTIVE, heartbeat_at__gt=since).values_list(
            "name", flat=True
        )
    )


def _confirm_or_run(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    describe: Callable[[Any], str],
    run: Callable[[Any, dict[str, Any]], str | None],
    pollers: list[str] | None = None,
    hidden: Callable[[Any], str] | None = None,
    allowed: Callable[[Any], bool] = can_move,
    done_url: str | None = None,
    form_class: type[ConfirmForm] | None = None,
    intro: str | None = None,
    keep: dict[str, str] | None = None,
) -> HttpResponse | None:
    if not allowed(request.user):
        raise PermissionDenied
    done_url = done_url or reverse("console-dashboard")
    objects = list(queryset)
    confirmed = request.POST.get("post") == "yes"
    form = (form_class or ConfirmForm)(request.POST if confirmed else None, pollers=pollers)
    if confirmed and form.is_valid():
        done = 0
        for obj in objects:
            summary = run(obj, {**form.cleaned_data, "seen": request.POST.get(f"seen_{obj.pk}")})
            if summary is None:
                continue
            audit(user=request.user, obj=obj, action=summary, reason=form.cleaned_data["reason"])
            done += 1
        skipped = len(objects) - done
        modeladmin.message_user(request, f"{title}: {done} done.", messages.SUCCESS)
        if skipped:
            modeladmin.message_user(
                request,
                f"{skipped} skipped (changed since you looked, or nothing to do).",
                messages.WARNING,
            )
        return HttpResponseRedirect(done_url)
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{title}: are you sure?",
        "subtitle": None,
        "opts": opts,
        "action": action,
        "action_title": title,
        "objects": [(obj, describe(obj), hidden(obj) if hidden else None) for obj in objects],
        "form": form,
        "no_pollers": pollers == [],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "cancel_url": done_url,
        "intro": intro,
        "keep": sorted((keep or {}).items()),  # carried through the confirming POST
    }
    return TemplateResponse(request, "admin/console/confirm_action.html", context)


def _lease_line(lease: ShardLease) -> str:
    owner = lease.owner or "nobody"
    pin = f", pinned to {lease.pinned_to}" if lease.pinned_to else ""
    return f"shard {lease.shard}: owner {owner} (epoch {lease.epoch}){pin}"


@admin.action(description="Move selected shards to a poller (pin)…", permissions=["move_shards"])
def pin_shards(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    # Read on every POST, the confirming one included: only a poller live now is a target.
    live = live_poller_names()

    def run(lease: ShardLease, data: dict[str, Any]) -> str | None:
        target = data["poller"]
        if target not in live:
            return None
        registration.shard_pin(shard=lease.shard, poller=target)
        return f"Pinned shard {lease.shard} to poller {target} (owner was {lease.owner})."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset.order_by("shard"),
        action="pin_shards",
        title="Move shards",
        describe=_lease_line,
        run=run,
        pollers=live,
    )


@admin.action(description="Unpin selected shards (back to the hash)…", permissions=["move_shards"])
def unpin_shards(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(lease: ShardLease, data: dict[str, Any]) -> str | None:
        if not lease.pinned_to:
            return None
        registration.shard_unpin(shard=lease.shard)
        return f"Unpinned shard {lease.shard} (was pinned to {lease.pinned_to})."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset.order_by("shard"),
        action="unpin_shards",
        title="Unpin shards",
        describe=_lease_line,
        run=run,
    )


@admin.action(description="Release stuck leases (fenced)…", permissions=["move_shards"])
def release_leases(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(lease: ShardLease, data: dict[str, Any]) -> str | None:
        # Fence on the owner and epoch the operator saw on the confirmation page.
        epoch, _, owner = (data.get("seen") or "").partition(":")
        if not owner or not epoch.isdigit():
            return None
        if not registration.lease_release(shard=lease.shard, owner=owner, epoch=int(epoch)):
            return None
        return f"Released shard {lease.shard} held by {owner} at epoch {epoch}."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset.order_by("shard"),
        action="release_leases",
        title="Release leases",
        describe=_lease_line,
        run=run,
        hidden=lambda lease: f"{lease.epoch}:{lease.owner}" if lease.owner else "",
    )


def _poller_line(poller: Poller) -> str:
    return f"poller {poller.name} ({poller.state}, heartbeat {poller.heartbeat_at:%H:%M:%S} UTC)"


@admin.action(description="Drain selected pollers (shards move away)…", permissions=["move_shards"])
def drain_pollers(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(poller: Poller, data: dict[str, Any]) -> str | None:
        if poller.state == PollerState.DRAINING:
            return None
        registration.poller_drain(name=poller.name)
        return f"Drained poller {poller.name}: its shards move to the others."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset,
        action="drain_pollers",
        title="Drain pollers",
        describe=_poller_line,
        run=run,
    )


@admin.action(description="Resume selected drained pollers…", permissions=["move_shards"])
def resume_pollers(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> Any:
    def run(poller: Poller, data: dict[str, Any]) -> str | None:
        if poller.state != PollerState.DRAINING:
            return None
        registration.poller_resume(name=poller.name)
        return f"Resumed poller {poller.name}: it takes its share of shards again."

    return _confirm_or_run(
        modeladmin,
        request,
        queryset,
        action="resume_pollers",
        title="Resume pollers",
        describe=_poller_line,
        run=run,
    )


class ConsoleActionsMixin:
    """Gate the move actions on ``polling.move_shards``: a POST without it is a 403."""

    def has_move_shards_permission(self, request: HttpRequest) -> bool:
        return can_move(request.user)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if (
            request.method == "POST"
            and request.POST.get("action") in MOVE_ACTIONS
            and not can_move(request.user)
        ):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)  # type: ignore[misc]
