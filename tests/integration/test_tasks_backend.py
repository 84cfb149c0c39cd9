"""scheduling.tasks.SendLaterBackend: Django's Tasks framework on the bucketed store."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist

from scheduling import handlers, keys
from scheduling.handlers import Delivery
from scheduling.models import Job, JobStatus
from scheduling.sharding.clock import db_now, open_bucket
from tests.support import tasks_demo

pytestmark = pytest.mark.django_db


def run_job(job: Job) -> None:
    """What the poller's handler sink does for one claimed job."""
    handlers.get(job.target)(
        Delivery(
            job_id=job.id,
            attempt=job.attempts + 1,
            due_at=job.due_at,
            payload=job.payload,
            metadata=job.metadata,
        )
    )


def test_enqueue_with_run_after_lands_in_its_bucket() -> None:
    when = db_now() + timedelta(hours=3)
    result = tasks_demo.add.using(run_after=when).enqueue(2, b=3)
    job = Job.objects.get(id=result.id)
    assert job.target_kind == "handler" and job.target == "django.task"
    assert job.team.slug == "django-tasks"
    assert job.due_at == when and job.bucket == keys.bucket_of(when, 60)
    assert job.shard == keys.shard_of(job.id, 64)
    assert result.status == TaskResultStatus.READY
    fetched = tasks_demo.add.get_result(result.id)
    assert fetched.args == [2] and fetched.kwargs == {"b": 3}


def test_success_records_the_return_value() -> None:
    result = tasks_demo.add.enqueue(20, 22)
    job = Job.objects.get(id=result.id)
    assert job.bucket == open_bucket(db_now())  # no run_after: due now
    run_job(job)
    Job.objects.filter(id=job.id).update(status=JobStatus.DELIVERED)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.finished_at is not None and result.attempts == 1


def test_failure_records_errors_and_fails_when_dead() -> None:
    result = tasks_demo.explode.enqueue("boom")
    job = Job.objects.get(id=result.id)
    with pytest.raises(RuntimeError, match="boom"):
        run_job(job)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # will be retried
    assert result.errors[0].exception_class is RuntimeError
    assert "boom" in result.errors[0].traceback
    Job.objects.filter(id=job.id).update(status=JobStatus.DEAD)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_context_sees_the_attempt() -> None:
    result = tasks_demo.which_attempt.enqueue("x")
    run_job(Job.objects.get(id=result.id))
    Job.objects.filter(id=result.id).update(status=JobStatus.DELIVERED)
    result.refresh()
    assert result.return_value == {"label": "x", "attempt": 1}


def test_unknown_results_and_bad_tasks() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks_demo.add.get_result(str(uuid.uuid4()))
    with pytest.raises(TaskResultDoesNotExist):
        tasks_demo.add.get_result("not-a-uuid")
    with pytest.raises(InvalidTask, match="aware"):
        tasks_demo.add.using(run_after=db_now().replace(tzinfo=None)).enqueue(1, 2)


def test_a_poller_runs_the_task_through_the_handler_sink() -> None:
    from polling.dispatch.handlers import HandlerSink
    from polling.dispatch.router import Router
    from tests.support.pollers import poller_build

    result = tasks_demo.add.enqueue(19, 23)
    poller = poller_build(sink=Router({"handler": HandlerSink(concurrency=1)}))
    poller.iterate(now=db_now() + timedelta(seconds=2))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert Job.objects.get(id=result.id).status == JobStatus.DELIVERED
