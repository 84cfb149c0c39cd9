"""``@sendlater_webhook``: verify, then run the view once per webhook-id."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..errors import InvalidSignature
from ..verify import verify
from .models import ProcessedWebhook


def _secrets() -> Sequence[str]:
    value = getattr(settings, "SENDLATER_WEBHOOK_SECRETS", None)
    if value is None:
        value = getattr(settings, "SENDLATER_WEBHOOK_SECRET", None)
    if not value:
        raise RuntimeError("set SENDLATER_WEBHOOK_SECRETS (a list) or SENDLATER_WEBHOOK_SECRET")
    return [value] if isinstance(value, str) else list(value)


def sendlater_webhook(
    view: Callable[..., HttpResponse] | None = None,
    *,
    secrets: Callable[[], Sequence[str]] | Sequence[str] | str | None = None,
    using: str | None = None,
) -> Any:
    """Decorate a view ``view(request, event, *args)``: 401 unless signed; once per id.

    The insert of the webhook-id and the view run in one transaction: the effect and
    the record commit together. A concurrent duplicate waits on the id's row lock, then
    fails the insert and answers 200 without running the view; a repeat afterwards
    finds the row. If the view raises or answers 5xx, both roll back and the sender retries.
    """

    def decorate(fn: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @functools.wraps(fn)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if callable(secrets):
                keys = secrets()
            elif secrets is None:
                keys = _secrets()
            else:
                keys = [secrets] if isinstance(secrets, str) else secrets
            try:
                event = verify(request.body, dict(request.headers), keys)
            except InvalidSignature:
                return HttpResponse("invalid signature", status=401)
            webhook_id = request.headers["webhook-id"]
            try:
                with transaction.atomic(using=using):
                    try:
                        with transaction.atomic(using=using):
                            ProcessedWebhook.objects.using(using).create(webhook_id=webhook_id)
                    except IntegrityError:
                        return HttpResponse("already processed", status=200)
                    response = fn(request, event, *args, **kwargs)
                    if response.status_code >= 500:
                        raise _Rollback(response)
            except _Rollback as rollback:
                return rollback.response
            return response

        return wrapper

    if view is not None:
        return decorate(view)
    return decorate


class _Rollback(Exception):
    def __init__(self, response: HttpResponse) -> None:
        self.response = response
