"""Authentication: team keys as Bearer tokens; the management command that makes them."""

from __future__ import annotations

import base64
import io

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from scheduling.models import ApiKey, Team
from scheduling.teams import api_key_revoke, team_rotate_signing_secret
from tests.support.api import error_of, job_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs"


def test_missing_key_is_401_with_challenge() -> None:
    response = APIClient().get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert error_of(response)["code"] == "not_authenticated"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer sl_000000000000_nope",
        "Bearer not-a-key",
        "Bearer",
        "Bearer a b",
    ],
)
def test_invalid_key_is_401(team, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post(URL, job_body(), format="json")
    assert response.status_code == 401
    assert error_of(response)["code"] == "authentication_failed"


def test_right_prefix_wrong_secret_is_401(api) -> None:
    prefix = api.api_key[: len("sl_") + 12]
    assert ApiKey.objects.filter(prefix=prefix[3:]).exists()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {prefix}_{'x' * 43}")
    assert client.get(URL).status_code == 401


def test_revoked_key_is_401(api) -> None:
    assert api.get(URL).status_code == 200
    api_key_revoke(api_key=ApiKey.objects.get())
    response = api.get(URL)
    assert response.status_code == 401
    assert error_of(response)["message"] == "Invalid or revoked API key."


def test_key_is_stored_hashed(api) -> None:
    row = ApiKey.objects.get()
    assert api.api_key not in (row.key_hash, row.prefix)
    assert len(row.key_hash) == 64


def test_create_api_key_creates_team_and_prints_key_and_secret_last() -> None:
    out = io.StringIO()
    call_command("create_api_key", "--team", "billing", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[-2].startswith("api_key: sl_")
    assert lines[-1].startswith("signing_secret: whsec_")
    team = Team.objects.get(slug="billing")
    assert lines[-1] == f"signing_secret: {team.signing_secret}"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {lines[-2].split(': ', 1)[1]}")
    assert client.post(URL, job_body(), format="json").status_code == 201
    # A second key for the same team: same team, same secret, another key.
    out2 = io.StringIO()
    call_command("create_api_key", "--team", "billing", stdout=out2)
    assert Team.objects.filter(slug="billing").count() == 1
    assert out2.getvalue().strip().splitlines()[-2] != lines[-2]


def test_signing_secret_is_standard_webhooks_format(team) -> None:
    assert team.signing_secret.startswith("whsec_")
    assert len(base64.b64decode(team.signing_secret.removeprefix("whsec_"))) >= 24


def test_rotate_signing_secret_keeps_previous_for_the_overlap(team, other_team) -> None:
    assert team.signing_secret != other_team.signing_secret
    old = team.signing_secret
    rotated = team_rotate_signing_secret(team=team, overlap_seconds=3600)
    rotated.refresh_from_db()
    assert rotated.previous_signing_secret == old
    assert rotated.signing_secret.startswith("whsec_") and rotated.signing_secret != old
    assert rotated.previous_signing_secret_expires_at is not None


def test_admin_revoke_action(admin_client, api) -> None:
    key = ApiKey.objects.get()
    response = admin_client.post(
        "/admin/scheduling/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
        follow=True,
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert api.get(URL).status_code == 401


def test_admin_pages_and_secret_rotation_action(admin_client, api, team) -> None:
    for url in (
        "/admin/scheduling/apikey/",
        f"/admin/scheduling/apikey/{ApiKey.objects.get().pk}/change/",
        "/admin/scheduling/team/add/",
        f"/admin/scheduling/team/{team.pk}/change/",
    ):
        assert admin_client.get(url).status_code == 200, url
    old = team.signing_secret
    admin_client.post(
        "/admin/scheduling/team/",
        {"action": "rotate_signing_secret", "_selected_action": [team.pk]},
    )
    team.refresh_from_db()
    assert team.previous_signing_secret == old and team.signing_secret != old
    response = admin_client.post(
        "/admin/scheduling/team/add/", {"name": "New Team", "slug": "new-team"}
    )
    assert response.status_code == 302
    assert Team.objects.get(slug="new-team").signing_secret.startswith("whsec_")
