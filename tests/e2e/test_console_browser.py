"""The console in a real browser: Playwright (sync API) driving Debian's chromium.

Walks through the operator's jobs against pytest-django's live server, on
whichever database the suite runs on: log in, spot the lagging shard, move it
to another poller through the confirmation page, schedule a cutover from its
preview, read a dead job's page and requeue it there; find the key with the most
waiting jobs on the flow page, pause it with a reason and resume it. Screenshots go
to the test's temporary folder, or to docs/screenshots/ with
SENDLATER_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from polling.models import ShardLease
from scheduling import keys
from scheduling.flow.models import FlowControl
from scheduling.models import Bucket, DeliveryAttempt, Job, JobStatus, ShardCountSchedule
from scheduling.sharding.clock import db_now
from scheduling.sharding.cutovers import cutover_earliest
from tests.support.console import job_make, lagging
from tests.support.factories import team_create
from tests.support.flows import flow_make
from tests.support.pollers import poller_build

CHROMIUM = "/usr/bin/chromium"
# The committed screenshots are refreshed only on request, so `make test` leaves
# the tree clean: SENDLATER_UPDATE_SCREENSHOTS=1 make test PYTEST_ARGS=-ktest_operator
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium"),
]


@pytest.fixture
def page() -> Iterator:
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an event loop on this thread; the ORM calls the
    # test makes between browser steps are plain synchronous code all the same.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        yield context.new_page()
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    if connection.vendor == "postgresql":
        # The live server thread returned its connections to the shared pool; close
        # them, or dropping the test database finds them still attached.
        connection.close()
        connection.close_pool()


def _login(page, base: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "pw-123456")
    page.click("input[type=submit]")


def _step(*pollers) -> None:
    for _ in range(2):
        for poller in pollers:
            poller.step()


def test_operator_walkthrough(page, live_server, settings, tmp_path) -> None:
    shots = DOCS_SCREENSHOTS if os.environ.get("SENDLATER_UPDATE_SCREENSHOTS") else tmp_path
    settings.SENDLATER_LAG_THRESHOLD_SECONDS = 60
    settings.SENDLATER_DASHBOARD_REFRESH_SECONDS = 0  # no reload under the test's feet
    get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-123456")
    team = team_create(slug="acme")
    p1, p2 = poller_build("p1"), poller_build("p2")
    _step(p1, p2)
    now = db_now()
    lagging(5, now=now, minutes=10)
    for minutes in (9, 8, 7):
        job_make(team, shard=5, due_at=now - timedelta(minutes=minutes))
    ahead = now + timedelta(hours=2)
    for i in range(120):  # the busiest bucket ahead sets the preview's peak
        job_make(team, shard=i % 64, due_at=ahead + timedelta(milliseconds=i))
    # Their bucket was recorded with 64 shards: it keeps them after the cutover.
    Bucket.objects.create(start=keys.bucket_of(ahead, 60), shard_count=64)
    dead = job_make(
        team,
        shard=1,
        due_at=now - timedelta(hours=1),
        status=JobStatus.DEAD,
        attempts=3,
        metadata={"order": "A-1042"},
    )
    Job.objects.filter(id=dead.id).update(
        target_kind="webhook", target="https://hooks.acme.example/orders"
    )
    for attempt, (result, code, error) in enumerate(
        [
            ("retry", 503, "upstream busy"),
            ("retry", 502, "bad gateway"),
            ("dead", None, "read timeout"),
        ],
        1,
    ):
        DeliveryAttempt.objects.create(
            job=dead,
            attempt=attempt,
            started_at=now - timedelta(hours=1) + timedelta(seconds=30 * attempt**2),
            duration_ms=120 * attempt,
            result=result,
            status_code=code,
            error=error,
            poller="p1",
        )
    owner = ShardLease.objects.get(shard=5).owner
    target = "p2" if owner == "p1" else "p1"
    base = live_server.url

    # Log in: the console names the product; then find the lagging shard highlighted.
    _login(page, base)
    assert page.title().endswith("| sendlater console")
    assert page.inner_text("#site-name") == "sendlater console"
    page.click("text=Lag dashboard")
    row = page.locator("#shard-5")
    assert "over-threshold" in (row.get_attribute("class") or "")
    assert page.locator("#lag-chart rect.over[data-shard='5']").count() == 1
    assert page.inner_text("#shards-over") == "1"
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "dashboard.png"), full_page=True)

    # Move it to the other poller through the confirmation page.
    row.locator("input[type=checkbox]").check()
    page.select_option("#shard-action", "pin_shards")
    page.click("#shard-go")
    assert "shard 5: owner" in page.inner_text("#confirm-objects")
    page.select_option("#id_poller", target)
    page.fill("#id_reason", "browser test: rebalance")
    page.click("#confirm-yes")
    assert page.inner_text("#shard-5 .pin") == target
    _step(p1, p2)  # the owner lets go after its batch; the pinned poller takes it
    page.reload()
    assert page.inner_text("#shard-5 .owner") == target
    assert ShardLease.objects.get(shard=5).owner == target

    # Schedule a cutover from its preview and see it listed.
    start = cutover_earliest(db_now()) + timedelta(hours=1)
    page.click("text=Reshard cutovers")
    page.fill("#id_shard_count", "128")
    page.fill("#id_effective_from", start.strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_reason", "browser test: more pollers")
    page.click("#cutover-preview-button")
    assert page.locator("#cutover-preview").is_visible()
    assert page.inner_text("#peak") == "120"
    assert page.inner_text("#recorded-after").startswith("1 bucket(s)")
    page.screenshot(path=str(shots / "cutover-preview.png"), full_page=True)
    page.click("#cutover-confirm")
    assert "Cutover scheduled: 128 shards" in page.inner_text(".messagelist")
    assert "128" in page.inner_text("#schedule tr.future")
    assert ShardCountSchedule.objects.filter(shard_count=128, effective_from=start).exists()

    # The dead job: found in the list (which offers no delete), read on its compact
    # page, requeued from there through the confirmation page.
    page.goto(f"{base}/admin/scheduling/job/?status__exact=dead")
    actions = page.locator("select[name=action] option").all_inner_texts()
    assert any("Requeue" in text for text in actions)
    assert not any("Delete" in text for text in actions)
    page.click(f"a[href*='{dead.id}']")
    assert page.inner_text("#job-status").lower() == "dead"
    assert page.locator("#job-timeline li.retry").count() == 2
    assert page.locator("#job-timeline li.dead").count() == 1
    assert page.locator("input[name=_save], a.deletelink").count() == 0
    page.screenshot(path=str(shots / "job-page.png"), full_page=True)
    page.click("#job-requeue_jobs")
    assert f"job {dead.id} of team acme: dead" in page.inner_text("#confirm-objects")
    page.fill("#id_reason", "browser test: receiver fixed")
    page.click("#confirm-yes")
    assert "Requeue jobs: 1 done." in page.inner_text(".messagelist")
    assert page.inner_text("#job-status").lower() == "pending"
    assert Job.objects.get(id=dead.id).status == JobStatus.PENDING
    for poller in (p1, p2):
        poller.shutdown()
    # Return this greenlet's connection to the pool before the fixture closes it.
    connection.close()


def test_operator_pauses_and_resumes_a_flow_key(page, live_server, tmp_path) -> None:
    shots = DOCS_SCREENSHOTS if os.environ.get("SENDLATER_UPDATE_SCREENSHOTS") else tmp_path
    get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-123456")
    acme, globex = team_create(slug="acme"), team_create(slug="globex")
    now = db_now()
    flow_make(acme, "partner", now=now, rate=200, period_seconds=60, waiting=12, delivered=180)
    flow_make(globex, "partner", now=now, rate=50, waiting=3)
    flow_make(acme, "mail", now=now, parallelism=4, paused=True)
    base = live_server.url

    # The key with the most waiting jobs comes first, with its rate in use.
    _login(page, base)
    page.click("text=Flow control")
    first = page.locator("#flows tbody tr").first
    assert first.get_attribute("data-team") == "acme"
    assert first.get_attribute("data-key") == "partner"
    assert first.locator(".waiting").inner_text() == "12"
    assert first.locator(".rate-in-use").inner_text() == "180 / 200 per 60 s (90 %)"
    assert page.inner_text("#flow-paused") == "1"
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "flows.png"), full_page=True)

    # Pause it through the confirmation page, with a reason.
    first.locator("button.flow-action").click()
    assert "key 'partner' of team acme: active" in page.inner_text("#confirm-objects")
    page.click("#confirm-yes")  # no reason yet: the browser asks for one
    assert page.locator("#id_reason:invalid").count() == 1
    assert not FlowControl.objects.get(team=acme, key="partner").paused
    page.fill("#id_reason", "browser test: partner is down")
    page.click("#confirm-yes")
    assert "Paused flow-control key 'partner' of team acme." in page.inner_text(".messagelist")
    row = page.locator("#flows tr[data-team=acme][data-key=partner]")
    assert "paused" in (row.get_attribute("class") or "")
    assert FlowControl.objects.get(team=acme, key="partner").paused
    assert not FlowControl.objects.get(team=globex, key="partner").paused

    # And resume it.
    row.locator("button.flow-action").click()
    page.fill("#id_reason", "browser test: partner is back")
    page.click("#confirm-yes")
    assert "Resumed flow-control key" in page.inner_text(".messagelist")
    assert not FlowControl.objects.get(team=acme, key="partner").paused
    # Return this greenlet's connection to the pool before the fixture closes it.
    connection.close()
