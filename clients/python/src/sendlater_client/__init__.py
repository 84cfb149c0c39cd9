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
from .models import (
    Attempt,
    Delivery,
    DeliveryFields,
    Endpoint,
    FlowControl,
    Job,
    JobFields,
    JobRetry,
    KeptResponse,
    Schedule,
    TeamDefaults,
    Topic,
    TopicDelivery,
)
from .verify import verify

__all__ = [
    "AsyncClient",
    "Attempt",
    "AuthenticationError",
    "Client",
    "Conflict",
    "Delivery",
    "DeliveryFields",
    "Endpoint",
    "FlowControl",
    "InvalidSignature",
    "Job",
    "JobFields",
    "JobRetry",
    "KeptResponse",
    "NotFound",
    "RateLimited",
    "RetryPolicy",
    "Schedule",
    "SendlaterError",
    "ServiceUnavailable",
    "TeamDefaults",
    "Topic",
    "TopicDelivery",
    "TransportError",
    "ValidationError",
    "verify",
]
