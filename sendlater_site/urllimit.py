"""Over-long URLs answer 414 in the API's JSON error shape.

gunicorn's own request-line limit answers with a plain-text 414 that no client of
the schema can parse, so gunicorn.conf.py lifts that limit and this middleware, first
in the chain, applies the bound instead (SENDLATER_MAX_URL_BYTES).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from scheduling.api.errors import error_body


class UrlLengthMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if url_too_long(request.META):
            limit = settings.SENDLATER_MAX_URL_BYTES
            message = f"The URL is longer than {limit} bytes (SENDLATER_MAX_URL_BYTES)."
            return JsonResponse(error_body("uri_too_long", message), status=414)
        return self.get_response(request)


def url_too_long(meta: dict[str, Any]) -> bool:
    """Whether the request's path and query string exceed SENDLATER_MAX_URL_BYTES."""
    length = len(meta.get("PATH_INFO", "").encode("utf-8", "surrogateescape"))
    length += len(meta.get("QUERY_STRING", ""))
    return length > settings.SENDLATER_MAX_URL_BYTES
