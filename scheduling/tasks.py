"""A Django Tasks backend (django.tasks) that stores tasks as sendlater jobs.

    TASKS = {"default": {"BACKEND": "scheduling.tasks.SendLaterBackend",
                         "OPTIONS": {"TEAM": "django-tasks"}}}

    send_reminder.using(run_after=when).enqueue(user_id=7)

The task becomes a job for the built-in ``django.task`` handler, lands in its
bucket and shard like any other job, and runs in a poller through the handler
sink; a raised exception is retried with the usual backoff until the job is dead.
Results (status, return value, errors) are read back with ``get_result``.
"""

from __future__ import annotations

import os
import socket
import uuid
from traceback import format_exception
from typing import Any

from django.db import transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from scheduling import handlers
from scheduling.jobs.inflight import job_in_flight
from scheduling.jobs.services import job_schedule
from scheduling.models import Job, JobStatus, TargetKind, TaskRun, Team

HANDLER_NAME = "django.task"

_STATUS = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.DELIVERED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.EXPIRED: TaskResultStatus.FAILED,
    JobStatus.CANCELED: TaskResultStatus.FAILED,
}


def _status(job: Job) -> TaskResultStatus:
    """A pending job in a poller's window is running (``scheduling.jobs.inflight``)."""
    if job.status == JobStatus.PENDING and job_in_flight(job):
        return TaskResultStatus.RUNNING
    return _STATUS[JobStatus(job.status)]


_FAILED_FOR_GOOD = {JobStatus.DEAD, JobStatus.EXPIRED, JobStatus.CANCELED}


def _task_result(task: Task, job: Job, run: TaskRun, backend: str) -> TaskResult:
    payload = job.payload or {}
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=_status(job),
        enqueued_at=job.created_at,
        started_at=run.started_at,
        # A task that failed for good ends when its job went dead.
        finished_at=run.finished_at or (job.updated_at if job.status in _FAILED_FOR_GOOD else None),
        last_attempted_at=run.last_attempted_at,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=[TaskError(**error) for error in run.errors],
        worker_ids=list(run.worker_ids),
    )
    object.__setattr__(result, "_return_value", run.return_value)
    return result


class SendLaterBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.team_slug = self.options.get("TEAM", "django-tasks")

    def _team(self) -> Team:
        team, _ = Team.objects.get_or_create(
            slug=self.team_slug, defaults={"name": f"Django tasks ({self.alias})"}
        )
        return team

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        payload = {
            "task": task.module_path,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
            "takes_context": task.takes_context,
            "backend": self.alias,
        }
        with transaction.atomic():
            job, _ = job_schedule(
                team=self._team(),
                due_at=task.run_after or timezone.now(),
                target_kind=TargetKind.HANDLER,
                target=HANDLER_NAME,
                payload=payload,
                metadata={"task": task.module_path[:200], "queue": task.queue_name},
            )
            run = TaskRun.objects.create(job=job, task_path=task.module_path)
        result = _task_result(task, job, run, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = uuid.UUID(str(result_id))
            job = Job.objects.select_related("task_run").get(id=job_id, target=HANDLER_NAME)
            run = job.task_run
        except (ValueError, Job.DoesNotExist, TaskRun.DoesNotExist) as error:
            raise TaskResultDoesNotExist(result_id) from error
        return _task_result(import_string(run.task_path), job, run, self.alias)


_WORKER_ID = f"{socket.gethostname()}-{os.getpid()}"


@handlers.register(HANDLER_NAME)
def run_django_task(delivery: handlers.Delivery) -> None:
    """Run the task a job carries; record its return value or error on its TaskRun."""
    payload = delivery.payload
    task: Task = import_string(payload["task"])
    job = Job.objects.select_related("task_run").get(id=delivery.job_id)
    run = job.task_run
    now = timezone.now()
    run.started_at = run.started_at or now
    run.last_attempted_at = now
    run.worker_ids = [*run.worker_ids, _WORKER_ID]
    run.save(update_fields=["started_at", "last_attempted_at", "worker_ids"])
    backend = payload.get("backend", "default")
    result = _task_result(task, job, run, backend)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(SendLaterBackend, task_result=result)
    try:
        if payload.get("takes_context"):
            value = task.call(
                TaskContext(task_result=result), *payload["args"], **payload["kwargs"]
            )
        else:
            value = task.call(*payload["args"], **payload["kwargs"])
    except Exception as error:
        kind = type(error)
        run.errors = [
            *run.errors,
            {
                "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
                "traceback": "".join(format_exception(error))[-4000:],
            },
        ]
        run.save(update_fields=["errors"])
        raise  # the handler sink turns this into a retry (or dead after max attempts)
    run.return_value = normalize_json(value)
    run.finished_at = timezone.now()
    run.save(update_fields=["return_value", "finished_at"])
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", run.return_value)
    task_finished.send(SendLaterBackend, task_result=result)
