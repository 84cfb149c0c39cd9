"""Rendezvous assignment: deterministic, balanced, minimal movement, pins win."""

from __future__ import annotations

from collections import Counter

from polling.ownership.assignment import assignment, shards_for


def test_same_inputs_same_answer_and_every_shard_assigned() -> None:
    first = assignment(shard_count=64, live=["c", "a", "b"])
    assert first == assignment(shard_count=64, live=["a", "b", "c"])
    assert sorted(first) == list(range(64))
    assert all(8 <= n <= 36 for n in Counter(first.values()).values())


def test_adding_a_poller_moves_only_shards_to_it() -> None:
    before = assignment(shard_count=1024, live=["p1", "p2", "p3"])
    after = assignment(shard_count=1024, live=["p1", "p2", "p3", "p4"])
    moved = [s for s in before if before[s] != after[s]]
    assert all(after[s] == "p4" for s in moved)
    assert 0.20 < len(moved) / 1024 < 0.30


def test_pins_override_but_only_to_live_pollers() -> None:
    plain = assignment(shard_count=8, live=["a", "b"])
    shard = next(s for s, o in plain.items() if o == "a")
    assert assignment(shard_count=8, live=["a", "b"], pins={shard: "b"})[shard] == "b"
    assert assignment(shard_count=8, live=["a", "b"], pins={shard: "gone"})[shard] == "a"


def test_more_pollers_than_shards_leaves_standbys() -> None:
    live = [f"p{i}" for i in range(6)]
    owned = [shards_for(name, shard_count=4, live=live) for name in live]
    assert sum(len(s) for s in owned) == 4
    assert sum(1 for s in owned if not s) >= 2
