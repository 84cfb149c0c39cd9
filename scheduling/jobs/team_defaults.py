"""A team's delivery defaults: its retry policy and its default failure callback
(``GET/PATCH /api/v1/team``). A job's own values win; what both leave out is the
service's (SENDLATER_MAX_ATTEMPTS, SENDLATER_RETRY_*)."""

from __future__ import annotations

from django.db import transaction

from scheduling.jobs.requests import RetryPolicy, retry_policy_check, webhook_url_check
from scheduling.models import Team


class Unset:
    """Not given (a PATCH leaves the value as it is)."""


UNSET = Unset()


def team_defaults_set(
    *,
    team: Team,
    retry: RetryPolicy | Unset | None = UNSET,
    default_on_failure_url: str | Unset | None = UNSET,
) -> Team:
    """Set the team's delivery defaults: its retry policy (a job's own wins; what both
    leave out is the service's) and the URL told when a job ends dead or expired,
    unless the job names its own. What is not given stays; None clears. Returns the
    team as stored."""
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        _defaults_apply(team, retry, default_on_failure_url)
    return team


def _defaults_apply(
    team: Team, retry: RetryPolicy | Unset | None, default_on_failure_url: str | Unset | None
) -> None:
    fields = []
    if not isinstance(retry, Unset):
        policy = retry or RetryPolicy()
        retry_policy_check(policy, field="retry")
        team.retry_max_attempts = policy.max_attempts
        team.retry_min_backoff_seconds = policy.min_backoff_seconds
        team.retry_max_backoff_seconds = policy.max_backoff_seconds
        fields += ["retry_max_attempts", "retry_min_backoff_seconds", "retry_max_backoff_seconds"]
    if not isinstance(default_on_failure_url, Unset):
        if default_on_failure_url is not None:
            webhook_url_check(
                default_on_failure_url,
                field="default_on_failure_url",
                name="default_on_failure_url",
            )
        team.default_on_failure_url = default_on_failure_url or ""
        fields.append("default_on_failure_url")
    if fields:
        team.save(update_fields=fields)


def team_retry_policy(team: Team) -> RetryPolicy | None:
    """The team's retry defaults (None: none set)."""
    policy = RetryPolicy(
        team.retry_max_attempts, team.retry_min_backoff_seconds, team.retry_max_backoff_seconds
    )
    return policy if policy.stored() else None
