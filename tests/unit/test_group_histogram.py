"""``polling.metrics.GroupHistogram``: a group of values observed at once exposes what
``prometheus_client.Histogram`` exposes for the same values one by one."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from polling.metrics import GroupHistogram

BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


def _exposed(registry: CollectorRegistry) -> tuple[list[str], float]:
    """The lines but ``_created``, and the sum apart (added in another order)."""
    lines = generate_latest(registry).decode().splitlines()
    (total,) = [float(line.split()[1]) for line in lines if line.startswith("lat_seconds_sum")]
    return [ln for ln in lines if "_created" not in ln and "_sum" not in ln], total


def _same(one: CollectorRegistry, many: CollectorRegistry) -> None:
    (lines, total), (lines_many, total_many) = _exposed(one), _exposed(many)
    assert lines == lines_many
    assert total_many == pytest.approx(total, rel=1e-12)


def test_groups_expose_what_one_by_one_observations_do() -> None:
    one, many = CollectorRegistry(), CollectorRegistry()
    plain = Histogram("lat_seconds", "doc", buckets=BUCKETS, registry=one)
    grouped = GroupHistogram("lat_seconds", "doc", BUCKETS, registry=many)
    rng = random.Random(7)
    # values on the bounds too: a bucket counts the values <= its le
    values = [rng.choice([0.0, 0.1, 1, 60, 3600, 5000]) for _ in range(50)]
    values += [rng.uniform(0, 4000) for _ in range(950)]
    for start in range(0, len(values), 137):
        group = values[start : start + 137]
        for value in group:
            plain.observe(value)
        grouped.observe_many(group)
    _same(one, many)
    assert any('le="60.0"} ' in line for line in _exposed(many)[0])  # as Histogram spells it
    grouped.observe_many([])
    _same(one, many)
