"""The project's signer agrees with the standardwebhooks package's, byte for byte."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from polling.dispatch.signing import signature_for, signed_headers, unix_seconds

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


@given(
    body=st.text(max_size=300),
    msg_id=st.uuids().map(str),
    seconds=st.integers(min_value=0, max_value=4_000_000_000),
)
def test_the_signature_is_the_packages(body: str, msg_id: str, seconds: int) -> None:
    at = datetime.fromtimestamp(seconds, UTC)
    theirs = [Webhook(s).sign(msg_id=msg_id, timestamp=at, data=body) for s in (SECRET, OLD)]
    ours = signature_for(secrets=[SECRET, OLD], msg_id=msg_id, seconds=seconds, body=body.encode())
    assert ours == " ".join(theirs)


def test_signed_headers_verify_with_the_package() -> None:
    body = '{"id":"x","payload":{"é":1}}'
    headers = signed_headers(secrets=[SECRET], msg_id="m-1", timestamp=datetime.now(UTC), body=body)
    assert Webhook(SECRET).verify(body.encode(), headers, json_parse=False) is None


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 6, 8, 0, 1, 900_000, tzinfo=UTC),
        datetime(2026, 12, 6, 9, 0, 1, 900_000, tzinfo=timezone(timedelta(hours=1))),
        datetime(2026, 12, 6, 8, 0, 1, 900_000),  # naive: read as UTC
    ],
)
def test_unix_seconds_is_the_instant_floored(at: datetime) -> None:
    assert unix_seconds(at) == 1796544001
