"""Tracing's cost per delivery attempt, in process: the span of an attempt
(``polling.dispatch.spans``) against exporters that do nothing or only encode.

Usage (from the repository root; no database is touched):

    .venv/bin/python bench/trace_spans.py            # 20,000 attempts each
    .venv/bin/python bench/trace_spans.py -n 50000

Prints ``cpu_us_per_attempt[...]`` (process CPU) for: ``made`` (the header and the
span, a simple processor, an exporter that drops), ``batched`` (the same through
the batch span processor) and ``encoded`` (a simple processor whose exporter
encodes each span as OTLP protobuf, as the OTLP exporter does before it sends).
``bench/webhook.py --traced`` measures the whole of it in the pollers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--attempts", type=int, default=20_000)
    n = parser.parse_args().attempts
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sendlater_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    import django

    django.setup()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from polling.dispatch import spans
    from polling.dispatch.base import ClaimedJob, Outcome
    from scheduling import tracing

    class Exporter(SpanExporter):
        def __init__(self, *, encode: bool) -> None:
            self.encode = encode
            self.spans = 0

        def export(self, batch):  # type: ignore[no-untyped-def]
            self.spans += len(batch)
            if self.encode:
                encode_spans(batch).SerializePartialToString()
            return SpanExportResult.SUCCESS

    now = datetime.now(UTC)
    for name, encode, batch in (
        ("made", False, False),
        ("batched", False, True),
        ("encoded", True, False),
    ):
        exporter = Exporter(encode=encode)
        tracing.install(tracing.provider_build(exporter, batch=batch))
        jobs = [
            ClaimedJob(
                id=uuid.uuid4(),
                team_id=1,
                due_at=now,
                bucket=now,
                shard=1,
                attempt=1,
                target_kind="webhook",
                target="http://127.0.0.1:8650/hook",
                payload={},
                metadata={},
                expires_at=None,
                trace_context=f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01",
            )
            for _ in range(n)
        ]
        started = time.process_time()
        for job in jobs:
            _, span_id = spans.delivery_headers(job, [])
            outcome = Outcome(
                job.id, "delivered", status_code=200, started_at=now, duration_seconds=0.001
            )
            spans.delivery_span(job, outcome, span_id)
        tracing.uninstall()  # flushes the batch processor
        spent = time.process_time() - started
        assert exporter.spans == n, exporter.spans
        print(f"cpu_us_per_attempt[{name}]: {spent * 1e6 / n:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
