"""Module-level Django tasks used by the Tasks-backend tests."""

from __future__ import annotations

from django.tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def explode(message: str) -> None:
    raise RuntimeError(message)


@task(takes_context=True)
def which_attempt(context, label: str) -> dict:
    return {"label": label, "attempt": context.attempt}
