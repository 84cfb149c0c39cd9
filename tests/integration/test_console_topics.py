"""The console's topics page: endpoints by topic with their state, enable and disable
through the confirmation page, with a reason and an audit entry."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages

from scheduling.flow.models import FlowControl
from scheduling.models import TopicEndpoint
from scheduling.topics.services import EndpointSpec, endpoint_state_set, topic_put
from tests.support.console import operator_make

pytestmark = pytest.mark.django_db
URL = "/admin/console/topics/"
DISABLE = "/admin/console/topics/disable/"
ENABLE = "/admin/console/topics/enable/"


@pytest.fixture
def topics(team, other_team):
    topic_put(
        team=team,
        name="orders",
        endpoints=[
            EndpointSpec(name="billing", url="https://billing.example.com/h"),
            EndpointSpec(name="crm", url="https://crm.example.com/h", flow_control_key="crm"),
        ],
    )
    topic_put(
        team=other_team,
        name="orders",
        endpoints=[EndpointSpec(name="billing", url="https://other.example.com/h")],
    )
    endpoint_state_set(team=team, topic="orders", name="crm", enabled=False, reason="500s")


def test_topics_of_every_team_with_their_endpoints(client, topics) -> None:
    client.force_login(operator_make("viewer"))
    response = client.get(URL)
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [(r["team"], r["name"]) for r in rows] == [("acme", "orders"), ("globex", "orders")]
    crm = {e["id"]: e for e in rows[0]["endpoints"]}["crm"]
    assert crm["disabled"] and crm["disabled_reason"] == "500s" and crm["key"] == "crm"
    assert response.context["can_change"] is False
    assert b"Disable\xe2\x80\xa6" not in response.content
    one = client.get(URL, {"team": "globex"})
    assert [r["team"] for r in one.context["rows"]] == ["globex"]


def test_disable_asks_for_a_reason_then_pauses_and_audits(client, topics) -> None:
    user = operator_make("operator", perms=("change_topicendpoint",))
    client.force_login(user)
    target = {"team": "acme", "topic": "orders", "endpoint": "billing"}
    page = client.post(DISABLE, target)
    assert page.status_code == 200 and "billing" in page.context["describe"]
    assert TopicEndpoint.objects.get(topic__team__slug="acme", name="billing").state == "enabled"
    done = client.post(DISABLE, {**target, "post": "yes", "reason": "their outage"})
    assert done.status_code == 302
    billing = TopicEndpoint.objects.get(topic__team__slug="acme", name="billing")
    assert billing.state == "disabled" and "their outage" in billing.disabled_reason
    assert FlowControl.objects.get(key="topic:orders:billing").paused is True
    entry = LogEntry.objects.get(user=user)
    assert "Disabled endpoint 'billing'" in entry.change_message
    assert "their outage" in entry.change_message
    (message,) = get_messages(done.wsgi_request)
    assert "Disabled" in str(message)
    # Enabled again the same way; the other team's endpoint of that name is untouched.
    client.post(ENABLE, {**target, "post": "yes", "reason": "back"})
    assert TopicEndpoint.objects.get(topic__team__slug="acme", name="billing").state == "enabled"
    assert FlowControl.objects.get(key="topic:orders:billing").paused is False
    assert not FlowControl.objects.filter(team__slug="globex").exists()


def test_without_the_permission_nothing_changes(client, topics) -> None:
    client.force_login(operator_make("viewer"))
    target = {"team": "acme", "topic": "orders", "endpoint": "billing"}
    response = client.post(DISABLE, {**target, "post": "yes", "reason": "x"})
    assert response.status_code == 403
    assert TopicEndpoint.objects.get(topic__team__slug="acme", name="billing").state == "enabled"


def test_an_unknown_endpoint_is_a_form_error(client, topics) -> None:
    client.force_login(operator_make("operator", perms=("change_topicendpoint",)))
    response = client.post(DISABLE, {"team": "acme", "topic": "orders", "endpoint": "nope"})
    assert response.status_code == 200 and response.context["describe"] is None
    assert "No endpoint" in str(response.context["target"].errors)
