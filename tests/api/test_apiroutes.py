"""API calls skip the session, user and message middleware; other URLs keep them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.support.api import job_body

pytestmark = pytest.mark.django_db


def test_api_calls_carry_no_session_user_or_messages(api) -> None:
    api.cookies["sessionid"] = "not-a-session"
    api.cookies["messages"] = "not-messages"
    response = api.post("/api/v1/jobs", job_body(), format="json")
    assert response.status_code == 201
    request = response.wsgi_request
    assert not hasattr(request, "session") and not hasattr(request, "_messages")
    assert "Cookie" not in response.get("Vary", "") and not response.cookies
    # Through DRF too (a list is not on the fast path): the key's team is the user.
    listed = api.get("/api/v1/jobs")
    assert listed.status_code == 200 and listed.wsgi_request.user.team is not None
    assert not hasattr(listed.wsgi_request, "session")


def test_the_admin_still_has_sessions_users_and_messages() -> None:
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    response = client.get("/admin/")
    assert response.status_code == 200
    assert response.wsgi_request.user == user
    assert hasattr(response.wsgi_request, "session") and hasattr(response.wsgi_request, "_messages")
