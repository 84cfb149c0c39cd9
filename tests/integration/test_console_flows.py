"""The console's flow-control page: keys by waiting, bounded pages, pause and resume."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext

from polling.console.flows import PAGE_SIZE
from scheduling.flow.models import FlowControl
from scheduling.sharding.clock import db_now
from tests.support.console import job_make, operator_make
from tests.support.flows import flow_make, flows_bulk

pytestmark = pytest.mark.django_db
URL = "/admin/console/flows/"
PAUSE = "/admin/console/flows/pause/"
RESUME = "/admin/console/flows/resume/"


@pytest.fixture
def operator(client):
    user = operator_make("flows-operator", perms=("change_flowcontrol",))
    client.force_login(user)
    return user


def _rows(response) -> list[tuple[str, str]]:
    return [(r["team"], r["key"]) for r in response.context["rows"]]


def test_keys_of_every_team_by_waiting_with_limits_and_live_state(
    client, operator, team, other_team
) -> None:
    now = db_now()
    flow_make(
        team, "partner", now=now, rate=200, period_seconds=60, waiting=5, in_flight=2, delivered=180
    )
    flow_make(team, "quiet", now=now, rate=None, parallelism=3, paused=True)
    # The same key name in another team is another key: its jobs are not acme's.
    flow_make(other_team, "partner", now=now, rate=5, waiting=7)
    flow_make(team, "busy", now=now, rate=50, waiting=6)
    response = client.get(URL)
    assert response.status_code == 200
    assert _rows(response) == [
        ("globex", "partner"),
        ("acme", "busy"),
        ("acme", "partner"),
        ("acme", "quiet"),
    ]
    rows = {(r["team"], r["key"]): r for r in response.context["rows"]}
    partner = rows["acme", "partner"]
    assert partner["waiting"] == 5 and partner["in_flight"] == 2
    assert partner["limits"] == "200 per 60 s" and partner["parallelism"] == "10"
    assert partner["rate_in_use"] == "180 / 200 per 60 s (90 %)"
    quiet = rows["acme", "quiet"]
    assert quiet["paused"] and quiet["limits"] == "—" and quiet["parallelism"] == "3"
    assert quiet["rate_in_use"] == "0 (no rate limit)"
    assert response.context["summary"] == {"keys": 4, "paused": 1, "waiting": 18, "in_flight": 2}
    html = response.content.decode()
    assert 'class="flow paused" data-team="acme" data-key="quiet"' in html
    assert html.count("Pause…") == 3 + 1  # three active keys, and the free-form pause
    assert html.count("Resume…") == 1


def test_the_page_is_bounded_and_its_queries_do_not_grow_with_keys(client, operator, team) -> None:
    now = db_now()
    flow_make(team, "hot", now=now, rate=10, waiting=2)
    with CaptureQueriesContext(connection) as few:
        assert client.get(URL).status_code == 200
    flows_bulk(team, 2 * PAGE_SIZE + 19, now=now)
    with CaptureQueriesContext(connection) as many:
        first = client.get(URL)
    assert len(many.captured_queries) == len(few.captured_queries)
    assert len(first.context["rows"]) == PAGE_SIZE
    assert first.context["rows"][0]["key"] == "hot"
    assert first.context["rest"] == PAGE_SIZE + 20
    assert f"{PAGE_SIZE + 20} more on the next pages" in first.content.decode()
    last = client.get(URL, {"page": 3})
    assert len(last.context["rows"]) == 20 and last.context["rest"] == 0
    # Out of range or not a number: the nearest page, never an error.
    assert client.get(URL, {"page": 999}).context["page"].number == 3
    assert client.get(URL, {"page": "x"}).context["page"].number == 1


def test_search_by_key_or_team(client, operator, team, other_team) -> None:
    now = db_now()
    flow_make(team, "partner-eu", now=now, rate=1)
    flow_make(other_team, "partner-us", now=now, rate=1)
    flow_make(team, "mail", now=now, rate=1)
    assert _rows(client.get(URL, {"q": "partner"})) == [
        ("acme", "partner-eu"),
        ("globex", "partner-us"),
    ]
    assert _rows(client.get(URL, {"q": "globex"})) == [("globex", "partner-us")]
    assert "No flow-control key matches" in client.get(URL, {"q": "nope"}).content.decode()


def test_viewers_see_no_actions_and_cannot_pause(client, team) -> None:
    flow = flow_make(team, "partner", now=db_now(), rate=1)
    client.force_login(operator_make("viewer"))
    html = client.get(URL).content.decode()
    assert "partner" in html and "Pause…" not in html and 'id="flow-pause-any"' not in html
    assert client.post(PAUSE, {"team": "acme", "key": "partner"}).status_code == 403
    data = {"team": "acme", "key": "partner", "post": "yes", "reason": "x"}
    assert client.post(PAUSE, data).status_code == 403
    assert not FlowControl.objects.get(pk=flow.pk).paused
    # The pause permission without the console's view permission opens nothing.
    outsider = operator_make("outsider")
    outsider.user_permissions.set(Permission.objects.filter(codename="change_flowcontrol"))
    client.force_login(outsider)
    assert client.get(URL).status_code == 403
    assert client.post(PAUSE, data).status_code == 403
    assert not FlowControl.objects.get(pk=flow.pk).paused


def test_pause_and_resume_through_confirmation_with_reason_and_audit(
    client, operator, team, other_team
) -> None:
    now = db_now()
    flow = flow_make(team, "partner", now=now, rate=200, waiting=3)
    theirs = flow_make(other_team, "partner", now=now, rate=200)
    page = client.post(PAUSE, {"team": "acme", "key": "partner"})
    assert page.status_code == 200 and b"are you sure" in page.content
    html = page.content.decode()
    assert "key &#x27;partner&#x27; of team acme: active" in html and "3 waiting" in html
    assert 'name="reason"' in html and 'name="post" value="yes"' in html
    assert not FlowControl.objects.get(pk=flow.pk).paused  # nothing before confirming
    # No reason: the page comes back with an error and nothing changes.
    again = client.post(PAUSE, {"team": "acme", "key": "partner", "post": "yes"})
    assert again.status_code == 200 and "This field is required" in again.content.decode()
    assert not FlowControl.objects.get(pk=flow.pk).paused
    done = client.post(
        PAUSE, {"team": "acme", "key": "partner", "post": "yes", "reason": "partner is down"}
    )
    assert done.status_code == 302 and done["Location"] == URL
    assert FlowControl.objects.get(pk=flow.pk).paused
    assert not FlowControl.objects.get(pk=theirs.pk).paused  # team isolation
    entry = LogEntry.objects.get(object_id=str(flow.pk))
    assert entry.user.username == "flows-operator"
    assert "Paused flow-control key 'partner' of team acme." in entry.change_message
    assert "Reason: partner is down" in entry.change_message
    assert [str(m) for m in get_messages(done.wsgi_request)] == [
        "Paused flow-control key 'partner' of team acme."
    ]
    # Pausing again changes nothing and records nothing.
    client.post(PAUSE, {"team": "acme", "key": "partner", "post": "yes", "reason": "again"})
    assert LogEntry.objects.filter(object_id=str(flow.pk)).count() == 1
    # The list now offers Resume for it.
    listed = client.get(URL)
    assert "Resume…" in listed.content.decode()
    done = client.post(
        RESUME, {"team": "acme", "key": "partner", "post": "yes", "reason": "partner is back"}
    )
    assert done.status_code == 302
    assert not FlowControl.objects.get(pk=flow.pk).paused
    entries = LogEntry.objects.filter(object_id=str(flow.pk)).order_by("action_time", "id")
    assert [e.change_message.split(" Reason: ")[1] for e in entries] == [
        "partner is down",
        "partner is back",
    ]


def test_pausing_a_key_without_limits_that_pending_jobs_carry(client, operator, team) -> None:
    job_make(team, shard=0, due_at=db_now(), flow_control_key="unlimited")
    page = client.post(PAUSE, {"team": "acme", "key": "unlimited"})
    assert "no limits recorded" in page.content.decode()
    done = client.post(
        PAUSE, {"team": "acme", "key": "unlimited", "post": "yes", "reason": "flood"}
    )
    assert done.status_code == 302
    flow = FlowControl.objects.get(team=team, key="unlimited")
    assert flow.paused and flow.rate is None and flow.parallelism is None
    assert LogEntry.objects.filter(object_id=str(flow.pk)).count() == 1


@pytest.mark.parametrize(
    ("url", "data", "field", "message"),
    [
        (PAUSE, {"team": "nobody", "key": "partner"}, "team", "No team 'nobody'."),
        (PAUSE, {"team": "acme", "key": "typo"}, "key", "No flow-control key 'typo'"),
        (RESUME, {"team": "acme", "key": "typo"}, "key", "No flow-control key 'typo'"),
        (PAUSE, {"team": "acme", "key": "k" * 101}, "key", "at most 100 characters"),
        (PAUSE, {"team": "acme"}, "key", "This field is required."),
        (RESUME, {}, "team", "This field is required."),
    ],
)
def test_bad_requests_get_a_form_error(client, operator, team, url, data, field, message) -> None:
    for confirmed in ({}, {"post": "yes", "reason": "because"}):
        response = client.post(url, {**data, **confirmed})
        assert response.status_code == 200
        errors = response.context["target"].errors
        assert any(message in e for e in errors[field]), errors
        assert 'name="post"' not in response.content.decode()  # no confirming a bad key
    assert not FlowControl.objects.exists()
    assert not LogEntry.objects.exists()
    # A plain GET of the confirmation page, without a key, is the same form error.
    assert client.get(url).status_code == 200


def test_resume_of_a_key_removed_meanwhile_is_a_form_error(client, operator, team) -> None:
    flow = flow_make(team, "partner", now=db_now(), rate=1, paused=True)
    assert client.post(RESUME, {"team": "acme", "key": "partner"}).status_code == 200
    flow.delete()  # the team removed its limits between the two pages
    response = client.post(
        RESUME, {"team": "acme", "key": "partner", "post": "yes", "reason": "back"}
    )
    assert response.status_code == 200
    assert response.context["target"].errors["key"][0].startswith("No flow-control key 'partner'")
    assert not LogEntry.objects.exists()
