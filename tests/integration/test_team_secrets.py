"""The secrets a team's webhooks are signed with (``team_signing_secrets``): read for
every batch, so a rotation signs the next delivery with both secrets."""

from __future__ import annotations

from datetime import timedelta

import pytest

from polling.dispatch.team_secrets import team_signing_secrets
from scheduling.models import Team
from scheduling.sharding.clock import db_now
from scheduling.teams import team_rotate_signing_secret

pytestmark = pytest.mark.django_db


def test_the_current_secret_then_both_while_the_rotation_overlaps(team, other_team) -> None:
    first = Team.objects.get(pk=team.pk).signing_secret
    assert team_signing_secrets([team.pk]) == {team.pk: [first]}
    rotated = team_rotate_signing_secret(team=team, overlap_seconds=3600)
    # read again at once: the next batch after the rotation carries both
    assert team_signing_secrets([team.pk]) == {team.pk: [rotated.signing_secret, first]}
    both = team_signing_secrets([team.pk, other_team.pk, team.pk])
    assert both == {
        team.pk: [rotated.signing_secret, first],
        other_team.pk: [Team.objects.get(pk=other_team.pk).signing_secret],
    }


def test_an_expired_overlap_signs_with_the_current_secret_alone(team) -> None:
    past = db_now() - timedelta(hours=2)
    rotated = team_rotate_signing_secret(team=team, overlap_seconds=60, now=past)
    assert team_signing_secrets([team.pk]) == {team.pk: [rotated.signing_secret]}


def test_unknown_teams_and_no_teams_have_no_secrets(team) -> None:
    Team.objects.filter(pk=team.pk).update(signing_secret="")
    assert team_signing_secrets([team.pk, 987_654]) == {team.pk: []}
    assert team_signing_secrets([987_654]) == {}
    assert team_signing_secrets([]) == {}
