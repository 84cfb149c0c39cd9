"""Migration 0003 gives every existing team its own signing secret."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("scheduling", "0002_seed_shard_count_schedule")]
AFTER = [("scheduling", "0003_api_keys_and_signing_secrets")]


@pytest.mark.django_db(transaction=True)
def test_existing_teams_get_distinct_signing_secrets() -> None:
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        executor.loader.build_graph()
        old_team = executor.loader.project_state(BEFORE).apps.get_model("scheduling", "Team")
        for slug in ("a", "b", "c"):
            old_team.objects.create(slug=slug, name=slug)
        executor.migrate(AFTER)
        executor.loader.build_graph()
        new_team = executor.loader.project_state(AFTER).apps.get_model("scheduling", "Team")
        secrets = list(new_team.objects.values_list("signing_secret", flat=True))
        assert len(secrets) == 3 and len(set(secrets)) == 3
        assert all(secret.startswith("whsec_") for secret in secrets)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
