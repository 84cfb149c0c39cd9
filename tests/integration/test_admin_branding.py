"""The admin names the product: "sendlater console", not "Django administration"."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db

PRODUCT = "sendlater console"


def _title(html: str) -> str:
    return re.search(r"<title>(.*?)</title>", html, re.S).group(1).strip()


def test_login_page_names_the_product(client) -> None:
    html = client.get("/admin/login/").content.decode()
    assert _title(html).endswith(PRODUCT)
    assert f'<div id="site-name"><a href="/admin/">{PRODUCT}</a></div>' in html
    assert "Django administration" not in html and "Django site admin" not in html


@pytest.mark.parametrize("url", ["/admin/", "/admin/console/", "/admin/scheduling/job/"])
def test_every_admin_page_names_the_product(client, url) -> None:
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert _title(html).endswith(f"| {PRODUCT}")
    assert f">{PRODUCT}</a>" in html
    assert "Django administration" not in html and "Django site admin" not in html
