"""The polling admin pages render and are read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from polling.ownership.registration import shard_rows_ensure

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["poller", "shardlease", "shardcheckpoint"])
def test_admin_lists_render_and_cannot_add(client, model) -> None:
    shard_rows_ensure(shard_count=4)
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    assert client.get(f"/admin/polling/{model}/").status_code == 200
    assert client.get(f"/admin/polling/{model}/add/").status_code == 403
