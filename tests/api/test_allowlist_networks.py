"""A network on SENDLATER_CALLBACK_ALLOWLIST admits its address literals at the API:
single create, bulk, schedules and the schema's pattern; other addresses stay refused."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings

from scheduling.models import Job, Schedule
from tests.support.api import error_of, job_body

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"
BULK = "/api/v1/jobs/bulk"
SCHEDULES = "/api/v1/schedules"
INSIDE = ("http://127.0.0.2:9000/hook", "http://127.255.255.254/x?y=1", "http://127.0.0.1/")
OUTSIDE = (
    "http://10.1.2.3/hook",  # private, not on the list
    "http://128.0.0.1/hook",  # just past 127.0.0.0/8 (public: no literal unless listed)
    "http://8.8.8.8/hook",
    "http://127.0.0.010/hook",  # octal to inet_aton: not the address it looks like
    "http://[::1]/hook",
    "http://[::::]/hook",
)


def _webhook_job(url: str) -> dict:
    body = job_body(callback_url=url)
    del body["handler"]
    return body


def _refused(response, field: str) -> None:
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] in {"invalid_target", "invalid"}, error
    assert list(error["fields"]) == [field], error


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["127.0.0.0/8"])
def test_single_create_admits_addresses_inside_the_network(api) -> None:
    for url in INSIDE:
        response = api.post(JOBS, _webhook_job(url), format="json")
        assert response.status_code == 201, (url, response.json())
        assert Job.objects.get(id=response.json()["id"]).target == url
    for url in OUTSIDE:
        _refused(api.post(JOBS, _webhook_job(url), format="json"), "callback_url")


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["127.0.0.0/8"])
def test_bulk_admits_addresses_inside_the_network(api) -> None:
    jobs = [_webhook_job(url) for url in INSIDE]
    response = api.post(BULK, {"jobs": jobs}, format="json")
    assert response.status_code == 201, response.json()
    assert Job.objects.count() == len(INSIDE)
    for url in OUTSIDE:
        response = api.post(BULK, {"jobs": [*jobs, _webhook_job(url)]}, format="json")
        _refused(response, f"jobs[{len(jobs)}].callback_url")
    assert Job.objects.count() == len(INSIDE)


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["127.0.0.0/8"])
def test_schedules_admit_addresses_inside_the_network(api) -> None:
    body = {"every_seconds": 60, "callback_url": INSIDE[0]}
    response = api.post(SCHEDULES, body, format="json")
    assert response.status_code == 201, response.json()
    sid = response.json()["id"]
    assert Schedule.objects.get(id=sid).target == INSIDE[0]
    response = api.patch(f"{SCHEDULES}/{sid}", {"callback_url": INSIDE[1]}, format="json")
    assert response.status_code == 200, response.json()
    for url in OUTSIDE:
        response = api.post(SCHEDULES, {**body, "callback_url": url}, format="json")
        _refused(response, "callback_url")
        response = api.patch(f"{SCHEDULES}/{sid}", {"callback_url": url}, format="json")
        _refused(response, "callback_url")
    assert Schedule.objects.get(id=sid).target == INSIDE[1]


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["10.0.0.0/8", "192.168.4.0/22", "127.0.0.1"])
def test_the_schema_pattern_admits_exactly_the_listed_networks(client) -> None:
    doc = client.get("/api/schema/?format=json").json()
    schemas = doc["components"]["schemas"]
    for name in ("JobCreateRequest", "ScheduleCreateRequest", "PatchedScheduleUpdateRequest"):
        pattern = re.compile(schemas[name]["properties"]["callback_url"]["pattern"])
        for url in (
            "http://10.0.0.1/x",
            "https://10.255.255.255:8443/",
            "http://192.168.7.200/",
            "http://127.0.0.1/",
            "https://example.com/hook",
        ):
            assert pattern.match(url), (name, url)
        for url in (
            "http://11.0.0.1/x",
            "http://192.168.8.1/",
            "http://192.168.3.255/",
            "http://127.0.0.2/",
            "http://010.0.0.1/",
            "http://10.0.0.256/",
            "http://[fd00::1]/",
        ):
            assert not pattern.match(url), (name, url)


@override_settings(SENDLATER_CALLBACK_ALLOWLIST=["fd00::/8"])
def test_an_ipv6_network_admits_its_addresses_and_refuses_others(api) -> None:
    response = api.post(JOBS, _webhook_job("http://[fd00::5]:8080/hook"), format="json")
    assert response.status_code == 201, response.json()
    for url in ("http://[fe80::1]/hook", "http://[::ffff:127.0.0.1]/", "http://[1.2.3.4]/"):
        _refused(api.post(JOBS, _webhook_job(url), format="json"), "callback_url")
        response = api.post(BULK, {"jobs": [_webhook_job(url)]}, format="json")
        _refused(response, "jobs[0].callback_url")


def test_a_second_hash_is_no_uri_and_is_refused(api) -> None:
    """A fragment holds no "#": such a URL would be echoed back as no valid "uri"."""
    for url in ("https://example.com/a#b#c", "https://example.com#%AbM#&d%db"):
        _refused(api.post(JOBS, _webhook_job(url), format="json"), "callback_url")
    for url in ("https://example.com/a?b=1#frag/x?y", "https://example.com#", "https://e.io?q#f"):
        response = api.post(JOBS, _webhook_job(url), format="json")
        assert response.status_code == 201, (url, response.json())
