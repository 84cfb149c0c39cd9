"""Postprocessing hook: the input rules the serializers enforce, stated in the schema.

drf-spectacular derives types and lengths from the fields; what it cannot see (the
patterns of api/contract.py, exactly-one-of targets, non-null payloads, the registered
handlers, links between operations, the 414 of an over-long URL) is added here, from
the same definitions the fields use, so the schema and the server cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.utils import timezone

from scheduling import handlers
from scheduling.api import contract
from scheduling.api.fields import allowlist_hosts
from scheduling.api.jobs.serializers import (
    MAX_BULK_JOBS,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_VALUE_CHARS,
)

_TEXT = {"type": "string", "pattern": contract.NO_NUL}
# Any JSON value the database can store: strings and keys without NUL.
_JSON_VALUE = {
    "anyOf": [
        {
            "type": "object",
            "propertyNames": _TEXT,
            "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
        },
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        _TEXT,
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
    ]
}
_PAYLOAD = {
    "description": "Any JSON value but null (strings without NUL characters).",
    "anyOf": [option for option in _JSON_VALUE["anyOf"] if option != {"type": "null"}],
}


def _metadata(min_entries: int = 0) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "type": "object",
        "description": "Labels: string keys to string values.",
        "maxProperties": MAX_METADATA_ENTRIES,
        "propertyNames": {**_TEXT, "minLength": 1, "maxLength": MAX_METADATA_KEY_CHARS},
        "additionalProperties": {**_TEXT, "maxLength": MAX_METADATA_VALUE_CHARS},
    }
    if min_entries:
        rule["minProperties"] = min_entries
    return rule


# A content type is the payload format's (the envelope is JSON): given in one body together.
_CONTENT_TYPE_NEEDS_PAYLOAD = {
    "if": {"required": ["content_type"], "properties": {"content_type": {"type": "string"}}},
    "then": {"required": ["format"], "properties": {"format": {"const": "payload"}}},
}
_ONE_TARGET = {
    "oneOf": [{"required": ["callback_url"]}, {"required": ["handler"]}, {"required": ["topic"]}]
}


def _request_bodies(schemas: dict[str, Any], due_at: str) -> None:
    url = contract.callback_url_pattern(allowlist_hosts())
    for name, component in schemas.items():
        if not name.endswith("Request"):
            continue
        component["additionalProperties"] = False  # unknown fields are refused (400)
        props = component.get("properties", {})
        for prop in props.values():
            if prop.get("type") == "string" and "enum" not in prop:
                prop.setdefault("pattern", contract.NO_NUL)
            if prop.get("format") == "date-time":
                prop["pattern"] = contract.DATETIME
        if "due_at" in props:
            props["due_at"]["pattern"] = due_at
        if "url" in props:  # a topic endpoint's
            props["url"]["pattern"] = url
        if "callback_url" in props:
            props["callback_url"]["pattern"] = url
        if "handler" in props:
            props["handler"]["enum"] = handlers.names()
            props["handler"].pop("pattern", None)
        if "topic" in props:
            props["topic"]["pattern"] = contract.TOPIC_NAME
        if "cron" in props:
            props["cron"]["pattern"] = contract.cron_pattern()
        if "payload" in props:
            props["payload"] = {**_PAYLOAD, "description": props["payload"].get("description", "")}
        if "metadata" in props:
            props["metadata"] = _metadata(1 if name == "JobCancelManyRequest" else 0)
        if "flow_control_key" in props:
            props["flow_control_key"]["pattern"] = contract.FLOW_CONTROL_KEY
        for callback in ("on_success_url", "on_failure_url", "default_on_failure_url"):
            if callback in props:
                props[callback]["pattern"] = url
        if "content_type" in props:
            props["content_type"]["pattern"] = contract.CONTENT_TYPE
            component.update(_CONTENT_TYPE_NEEDS_PAYLOAD)
    schemas["JobCreateRequest"].update(_ONE_TARGET)
    schemas["PatchedJobRescheduleRequest"]["required"] = ["due_at"]
    cancel = schemas["JobCancelManyRequest"]
    cancel["anyOf"] = [{"required": ["ids"]}, {"required": ["metadata"]}]
    cancel["properties"]["ids"].update(minItems=1, maxItems=MAX_BULK_JOBS)
    schemas["JobBulkCreateRequest"]["properties"]["jobs"].update(minItems=1, maxItems=MAX_BULK_JOBS)
    schemas["JsonValue"] = _JSON_VALUE


# Lists ordered by something else than (time, id) have cursors of their own shape.
_CURSORS = {
    "flow_controls_list": contract.FLOW_CONTROL_CURSOR,
    "topics_list": contract.FLOW_CONTROL_CURSOR,
}


def _query_parameters(paths: dict[str, Any]) -> None:
    for item in paths.values():
        for operation in item.values():
            for param in operation.get("parameters", []):
                if param.get("in") != "query":
                    continue
                rule = param.get("schema", {})
                name = param["name"]
                if name == "cursor":
                    rule["pattern"] = _CURSORS.get(operation["operationId"], contract.CURSOR)
                elif name == "flow_control_key":
                    rule["pattern"] = contract.FLOW_CONTROL_KEY
                elif name == "metadata":
                    rule["maxItems"] = MAX_METADATA_ENTRIES
                    rule["items"] = {"type": "string", "pattern": contract.METADATA_FILTER}
                elif rule.get("format") == "date-time":
                    rule["pattern"] = contract.DATETIME


# PATCHes whose every field is optional: no body changes nothing.
_BODY_OPTIONAL = frozenset({"schedules_update", "team_update", "topics_endpoint_update"})

JOB_LINKS = {
    name: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
    for name, op in (
        ("GetJob", "jobs_retrieve"),
        ("RescheduleJob", "jobs_reschedule"),
        ("CancelJob", "jobs_cancel"),
        ("JobAttempts", "jobs_attempts"),
        ("RequeueJob", "jobs_requeue"),
    )
}


def document_rules(result: dict, generator: object, **kwargs: object) -> dict:
    """Postprocessing hook (see the module docstring)."""
    today = timezone.now().astimezone(UTC).date()
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    _request_bodies(schemas, contract.due_at_pattern(today))
    paths = result.get("paths", {})
    _query_parameters(paths)
    for item in paths.values():
        for operation in item.values():
            # No body is a 400 (a required field is missing), except where every
            # field is optional: a PATCH of a schedule or the team without a body
            # changes nothing.
            if "requestBody" in operation and operation["operationId"] not in _BODY_OPTIONAL:
                operation["requestBody"]["required"] = True
    create = paths["/api/v1/jobs"]["post"]["responses"]
    for status in ("200", "201"):
        create[status]["links"] = JOB_LINKS
    return result
