"""The flow-control services the API calls: their checks, and a new key made concurrently."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from scheduling.errors import InvalidFlowControl
from scheduling.flow.models import FlowControl
from scheduling.flow.selectors import flow_list
from scheduling.flow.services import (
    PARALLELISM_MAX,
    RATE_MAX,
    flow_limits_set,
    flow_pause_set,
)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"key": "a/b", "rate": 1}, "key"),
        ({"key": "a\x00b", "rate": 1}, "key"),
        ({"key": "k" * 101, "rate": 1}, "key"),
        ({"key": "", "rate": 1}, "key"),
        ({"key": "k", "rate": RATE_MAX + 1}, "rate"),
        ({"key": "k", "rate": None, "parallelism": PARALLELISM_MAX + 1}, "parallelism"),
        ({"key": "k", "rate": 1, "period_seconds": 86_401}, "period_seconds"),
        ({"key": "k", "rate": None}, "rate"),
    ],
)
def test_the_services_check_what_the_api_checks(team, kwargs, field) -> None:
    with pytest.raises(InvalidFlowControl) as error:
        flow_limits_set(team=team, **kwargs)
    assert error.value.field == field
    with pytest.raises(InvalidFlowControl):
        flow_pause_set(team=team, key="a/b", paused=True)
    assert not FlowControl.objects.exists()


@pytest.mark.django_db
def test_flow_list_pages_a_teams_keys(team, other_team) -> None:
    for key in ("c", "a", "b"):
        flow_limits_set(team=team, key=key, rate=1)
    flow_limits_set(team=other_team, key="a0", rate=1)
    assert [f.key for f in flow_list(team_id=team.pk, limit=2)] == ["a", "b"]
    assert [f.key for f in flow_list(team_id=team.pk, after="b")] == ["c"]
    assert [f.key for f in flow_list(team_id=team.pk, after="")] == ["a", "b", "c"]


@pytest.mark.django_db(transaction=True)
def test_a_pause_racing_the_first_write_of_a_key_pauses_that_row(team) -> None:
    """The pause sees no row, but another transaction's INSERT of the key is under way:
    its own INSERT waits on the unique index, fails when that commits, and the pause
    then applies to the committed row (no IntegrityError, no 500)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: SQLite serializes writers")
    errors: list[BaseException] = []

    def pause() -> None:
        try:
            flow_pause_set(team=team, key="partner", paused=True)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    with transaction.atomic():
        flow_limits_set(team=team, key="partner", rate=5)
        thread = threading.Thread(target=pause)
        thread.start()
        time.sleep(0.5)  # the pause is now waiting on the key's uncommitted row
    thread.join(timeout=30)
    assert not errors, errors
    assert list(FlowControl.objects.values_list("key", "rate", "paused")) == [("partner", 5, True)]
