"""The console's permissions: custom ones (declared on ``ShardLease.Meta``) and model ones."""

from __future__ import annotations

from typing import Any

MOVE_SHARDS = "polling.move_shards"
SCHEDULE_CUTOVER = "polling.schedule_cutover"
VIEW_CONSOLE = "polling.view_shardlease"
# Flow control is the scheduling app's: its model's change permission, as for schedules.
PAUSE_FLOWS = "scheduling.change_flowcontrol"
CHANGE_ENDPOINTS = "scheduling.change_topicendpoint"


def can_move(user: Any) -> bool:
    """Pin, unpin, drain, resume and release: anything that changes ownership."""
    return bool(user.has_perm(MOVE_SHARDS))


def can_cutover(user: Any) -> bool:
    return bool(user.has_perm(SCHEDULE_CUTOVER))


def can_pause_flows(user: Any) -> bool:
    """Pause and resume a team's flow-control key from the console."""
    return bool(user.is_active and user.has_perm(PAUSE_FLOWS))


def can_change_endpoints(user: Any) -> bool:
    """Enable and disable a team's topic endpoint from the console."""
    return bool(user.is_active and user.has_perm(CHANGE_ENDPOINTS))


def can_view(user: Any) -> bool:
    """Read the dashboard, pollers page and cutover schedule."""
    return bool(user.is_active and user.is_staff and user.has_perm(VIEW_CONSOLE))
