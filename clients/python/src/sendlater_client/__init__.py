"""sendlater client: schedule jobs over the REST API, verify the webhooks it sends."""

from ._retry import RetryPolicy
from .client import AsyncClient, Client
from .errors import (
    AuthenticationError,
    Conflict,
    InvalidSignature,
    NotFound,
    RateLimited,
    SendlaterError,
    ServiceUnavailable,
    TransportError,
    ValidationError,
)
from .models import Attempt, FlowControl, Job
from .verify import verify

__all__ = [
    "AsyncClient",
    "Attempt",
    "AuthenticationError",
    "Client",
    "Conflict",
    "FlowControl",
    "InvalidSignature",
    "Job",
    "NotFound",
    "RateLimited",
    "RetryPolicy",
    "SendlaterError",
    "ServiceUnavailable",
    "TransportError",
    "ValidationError",
    "verify",
]
