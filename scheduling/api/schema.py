"""OpenAPI documentation pieces: the auth scheme, the error responses, examples."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from scheduling.api.errors import ErrorSerializer

JOB_ID = "3f2b8c1e-5a3d-4c6e-9f10-2b7a9e4d1c05"


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "scheduling.api.access.auth.BearerKeyAuthentication"
    name = "bearerKey"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A team API key from `manage.py create_api_key --team <slug>`.",
        }


JOB_ID_PARAMETER = OpenApiParameter(
    "job_id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The job's id, as returned when it was scheduled.",
    examples=[OpenApiExample("A job id", value=JOB_ID)],
)


def _error(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    body: dict = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return {"error": body}


_ERRORS: dict[int, tuple[str, list[OpenApiExample]]] = {
    400: (
        "Invalid input: unknown fields, wrong types, naive or unparsable datetimes, "
        "due times beyond the horizon, unknown handlers, refused callback URLs.",
        [
            OpenApiExample(
                "Naive datetime",
                value=_error(
                    "invalid",
                    "The request is not valid; see fields.",
                    {"due_at": ["Datetime has no UTC offset; add one, e.g. ...Z."]},
                ),
            ),
            OpenApiExample(
                "Bulk item invalid (nothing written)",
                value=_error(
                    "invalid_due_at",
                    "due_at is more than 400 days ahead (SENDLATER_MAX_HORIZON_DAYS).",
                    {"jobs[17].due_at": ["due_at is more than 400 days ahead."]},
                ),
            ),
            OpenApiExample(
                "Private callback host",
                value=_error(
                    "invalid_target",
                    "callback_url is not allowed: address 10.0.0.5 is private.",
                    {"callback_url": ["callback_url is not allowed: address 10.0.0.5 is private."]},
                ),
            ),
        ],
    ),
    401: (
        "Missing, invalid or revoked API key.",
        [
            OpenApiExample(
                "No key",
                value=_error("not_authenticated", "Authentication credentials were not provided."),
            ),
            OpenApiExample(
                "Revoked key",
                value=_error("authentication_failed", "Invalid or revoked API key."),
            ),
        ],
    ),
    404: (
        "No such job for this team (another team's job answers 404 too).",
        [OpenApiExample("Not found", value=_error("not_found", f"job {JOB_ID} does not exist."))],
    ),
    409: (
        "The job is not pending (delivered, in flight, canceled, expired), or the "
        "idempotency key was used with a different body.",
        [
            OpenApiExample(
                "Not pending",
                value=_error(
                    "not_pending",
                    f"job {JOB_ID} is delivered; only pending jobs can be changed.",
                    {"status": ["..."]},
                ),
            ),
            OpenApiExample(
                "Idempotency conflict",
                value=_error(
                    "idempotency_conflict",
                    "idempotency_key 'booking-42' was used with a different request body.",
                    {"idempotency_key": ["..."]},
                ),
            ),
        ],
    ),
    413: (
        "A payload over SENDLATER_MAX_PAYLOAD_BYTES, or a body over SENDLATER_MAX_REQUEST_BYTES.",
        [
            OpenApiExample(
                "Payload too large",
                value=_error(
                    "payload_too_large",
                    "payload is 70000 bytes as compact JSON; the limit is 65536.",
                    {"payload": ["..."]},
                ),
            )
        ],
    ),
    414: (
        "The URL (path and query) is longer than SENDLATER_MAX_URL_BYTES.",
        [
            OpenApiExample(
                "URL too long",
                value=_error(
                    "uri_too_long", "The URL is longer than 8192 bytes (SENDLATER_MAX_URL_BYTES)."
                ),
            )
        ],
    ),
    415: (
        "The body is not application/json.",
        [
            OpenApiExample(
                "Not JSON",
                value=_error("unsupported_media_type", 'Unsupported media type "text/plain".'),
            )
        ],
    ),
    429: (
        "The team's request budget is spent; retry after the Retry-After header's seconds.",
        [
            OpenApiExample(
                "Throttled",
                value=_error(
                    "throttled", "Request was throttled. Expected available in 3 seconds."
                ),
            )
        ],
    ),
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Error responses for ``extend_schema(responses=...)``, all in the one error shape."""
    return {
        code: OpenApiResponse(
            ErrorSerializer, description=_ERRORS[code][0], examples=_ERRORS[code][1]
        )
        for code in codes
    }


# Every authenticated endpoint can answer these.
COMMON = (400, 401, 414, 429)
WITH_BODY = (*COMMON, 413, 415)

JOB_EXAMPLE = {
    "id": JOB_ID,
    "status": "pending",
    "due_at": "2027-03-01T09:00:00Z",
    "bucket": "2027-03-01T09:00:00Z",
    "shard": 17,
    "attempts": 0,
    "callback_url": "https://example.com/hooks/reminder",
    "handler": None,
    "payload": {"booking": 42, "kind": "reminder"},
    "metadata": {"booking": "42"},
    "idempotency_key": "booking-42-reminder",
    "window_seconds": 0,
    "expires_at": None,
    "delivered_at": None,
    "last_error": "",
    "created_at": "2027-02-27T12:00:00Z",
    "updated_at": "2027-02-27T12:00:00Z",
    "schedule_id": None,
    "scheduled_for": None,
    "flow_control_key": None,
}

CREATE_EXAMPLES = [
    OpenApiExample(
        "Webhook job",
        request_only=True,
        value={
            "due_at": "2027-03-01T09:00:00+00:00",
            "callback_url": "https://example.com/hooks/reminder",
            "payload": {"booking": 42, "kind": "reminder"},
            "idempotency_key": "booking-42-reminder",
            "metadata": {"booking": "42"},
        },
    ),
    OpenApiExample(
        "Handler job, spread over 15 minutes, expires after an hour",
        request_only=True,
        value={
            "due_at": "2027-03-01T09:00:00+01:00",
            "handler": "noop",
            "payload": {"user": 7},
            "window_seconds": 900,
            "expires_after_seconds": 3600,
        },
    ),
    OpenApiExample("Job", response_only=True, value=JOB_EXAMPLE),
]


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before the team's budget allows another call.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
_REPLAYED = {
    "Idempotent-Replayed": {
        "description": "`true` when the answer is an idempotent replay of an earlier call.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
_LOCATION = {
    "Location": {
        "description": "Path of the new job.",
        "required": True,
        "schema": {"type": "string"},
    }
}


def document_headers(result: dict, generator: object, **kwargs: object) -> dict:
    """Postprocessing hook: the response headers drf-spectacular has no decorator for."""
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            if "429" in responses:
                responses["429"]["headers"] = _RETRY_AFTER
            if path == "/api/v1/jobs" and method == "post":
                responses["201"]["headers"] = _LOCATION
                responses["200"]["headers"] = _REPLAYED
    return result
