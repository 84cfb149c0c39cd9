"""The jobs changelist: index-served search and filters, estimated counts, actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from scheduling.console.paginators import EstimatedCountPaginator, estimate_count
from scheduling.jobs.services import job_schedule
from scheduling.models import DeliveryAttempt, Job, JobStatus
from scheduling.sharding.clock import db_now
from tests.support.factories import team_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def _schedule(team, *, minutes: float = 30, **extra) -> Job:
    job, _ = job_schedule(
        team=team,
        due_at=db_now() + timedelta(minutes=minutes),
        target_kind="handler",
        target="noop",
        **extra,
    )
    return job


def _listed(admin_client, query: str) -> set:
    response = admin_client.get(f"/admin/scheduling/job/?{query}")
    assert response.status_code == 200
    return {job.id for job in response.context["cl"].result_list}


def test_search_by_id_key_team_and_metadata(admin_client, team) -> None:
    other = team_create(slug="globex")
    a = _schedule(team, idempotency_key="order-1", metadata={"customer": "42"})
    b = _schedule(other, idempotency_key="order-1")
    c = _schedule(other, metadata={"customer": "7"})
    assert _listed(admin_client, f"q={a.id}") == {a.id}
    assert _listed(admin_client, "q=order-1") == {a.id, b.id}
    assert _listed(admin_client, "q=globex") == {b.id, c.id}
    assert _listed(admin_client, "q=team:acme") == {a.id}
    assert _listed(admin_client, "q=customer%3D42") == {a.id}
    assert _listed(admin_client, "q=nothing-here") == set()


def test_filters_by_status_and_due_range(admin_client, team) -> None:
    soon = _schedule(team, minutes=20)
    later = _schedule(team, minutes=60 * 30)
    gone = _schedule(team, minutes=10)
    Job.objects.filter(id=gone.id).update(status=JobStatus.DEAD)
    assert _listed(admin_client, "status__exact=pending") == {soon.id, later.id}
    assert _listed(admin_client, "status__exact=dead") == {gone.id}
    assert _listed(admin_client, "due=next-hour") == {soon.id, gone.id}
    assert _listed(admin_client, "due=next-week&status__exact=pending") == {soon.id, later.id}


def test_actions_cancel_fire_now_and_requeue(admin_client, team) -> None:
    pending = _schedule(team, minutes=90)
    to_fire = _schedule(team, minutes=90)
    dead = _schedule(team, minutes=5)
    Job.objects.filter(id=dead.id).update(status=JobStatus.DEAD, attempts=10)

    def act(action: str, *jobs: Job):
        """The changelist action, then its confirmation page (with what it showed)."""
        ids = [str(j.id) for j in jobs]
        confirm = admin_client.post(
            "/admin/scheduling/job/", {"action": action, "_selected_action": ids, "index": 0}
        )
        assert confirm.status_code == 200 and b"are you sure?" in confirm.content
        seen = {f"seen_{obj.pk}": hidden for obj, _line, hidden in confirm.context["objects"]}
        body = {"action": action, "_selected_action": ids, "post": "yes", "reason": "test"}
        done = admin_client.post("/admin/scheduling/job/", {**body, **seen})
        assert done.status_code == 302 and done["Location"] == "/admin/scheduling/job/"

    act("cancel_jobs", pending, dead)
    assert Job.objects.get(id=pending.id).status == JobStatus.CANCELED
    assert Job.objects.get(id=dead.id).status == JobStatus.DEAD  # refused: not pending
    before = db_now()
    act("fire_now", to_fire)
    fired = Job.objects.get(id=to_fire.id)
    assert fired.status == JobStatus.PENDING and fired.due_at <= db_now()
    assert fired.due_at >= before - timedelta(seconds=1)
    act("requeue_jobs", dead)
    requeued = Job.objects.get(id=dead.id)
    assert requeued.status == JobStatus.PENDING and requeued.attempts == 0


def test_detail_shows_attempts(admin_client, team) -> None:
    job = _schedule(team)
    DeliveryAttempt.objects.create(
        job=job, attempt=1, started_at=db_now(), result="retry", status_code=503, error="boom"
    )
    page = admin_client.get(f"/admin/scheduling/job/{job.id}/change/")
    assert page.status_code == 200
    assert "boom" in page.content.decode() and "503" in page.content.decode()


def test_detail_shows_the_flow_control_key_read_only(admin_client, team) -> None:
    job = _schedule(team, flow_control_key="partner-api")
    page = admin_client.get(f"/admin/scheduling/job/{job.id}/change/").content.decode()
    assert "Flow control key" in page and "partner-api" in page
    assert 'name="flow_control_key"' not in page  # shown, not editable


def test_changelist_has_no_date_hierarchy_and_estimates(admin_client, team) -> None:
    _schedule(team)
    page = admin_client.get("/admin/scheduling/job/")
    cl = page.context["cl"]
    assert cl.date_hierarchy is None and not cl.show_full_result_count
    assert isinstance(cl.paginator, EstimatedCountPaginator)
    assert cl.result_count == 1  # small results are counted exactly
    if connection.vendor == "postgresql":
        assert isinstance(estimate_count(Job.objects.all()), int)
        assert isinstance(estimate_count(Job.objects.filter(status="dead")), int)
    else:
        assert estimate_count(Job.objects.all()) is None


@pytest.mark.postgres
def test_large_estimates_skip_the_count(monkeypatch) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    import scheduling.console.paginators as paginators

    monkeypatch.setattr(paginators, "estimate_count", lambda qs: 10_000_000)
    paginator = EstimatedCountPaginator(Job.objects.order_by("pk"), 100)
    assert paginator.count == 10_000_000


@pytest.mark.postgres
def test_console_queries_have_their_indexes() -> None:
    """The dead-letter filter and the dashboard's delivery counts are index ranges."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    now = db_now()
    queries = {
        "job_dead_due": Job.objects.filter(status="dead").order_by("-due_at")[:100],
        "job_delivered_at": Job.objects.filter(
            status="delivered", delivered_at__gte=now - timedelta(minutes=1)
        ).values("shard"),
    }
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # tiny tables: show the index choice
        for index, queryset in queries.items():
            sql, params = queryset.query.sql_with_params()
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # On the partitioned table each partition has its own copy of the index.
            cursor.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
                [index],
            )
            names = {index, *(name for (name,) in cursor.fetchall())}
            assert any(name in plan for name in names), plan
