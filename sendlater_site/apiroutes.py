"""Middleware with nothing to do on API calls, skipped for them.

``/api/v1/`` is authenticated by team keys (DRF, ``scheduling.api.access.auth``), never by a
session: no API view reads the session, the Django user or flash messages. Building
a session store, a lazy user and a message store for each call, then checking
on the way out that none was touched, cost ~5 % of a single-job call's worker CPU
(docs/performance.md). These subclasses (so the admin's system checks still find the
middleware they need) pass API calls straight on and behave as Django's for every
other URL.
"""

from __future__ import annotations

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase

API_PREFIX = "/api/v1/"


class SessionMiddlewareExceptApi(SessionMiddleware):
    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        return super().__call__(request)


class AuthenticationMiddlewareExceptApi(AuthenticationMiddleware):
    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        return super().__call__(request)


class MessageMiddlewareExceptApi(MessageMiddleware):
    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        return super().__call__(request)
