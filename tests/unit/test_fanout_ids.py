"""Topic children's ids (``polling.writing.fanout._ids_on_shards``): random version-4
UUIDs (their canonical text) whose shard is ``keys.shard_of`` of them, drawn on the
parents' shards."""

from __future__ import annotations

import uuid

from polling.writing.fanout import _ids_on_shards
from scheduling import keys


def test_ids_are_drawn_on_the_wanted_shards_and_are_ordinary_ids() -> None:
    wanted = set(range(0, 64, 2))  # half of 64: about two draws an id
    got = _ids_on_shards(3000, 64, wanted)
    assert len(got) == 3000 and len({text for text, _ in got}) == 3000
    for text, shard in got:
        value = uuid.UUID(text)
        assert value.version == 4 and value.variant == uuid.RFC_4122
        assert text == str(value)  # the canonical text, as the id is stored and hashed
        assert shard == keys.shard_of(value, 64) and shard in wanted
    assert len({shard for _, shard in got}) == len(wanted)  # spread over all of them


def test_shards_past_the_buckets_count_are_not_wanted() -> None:
    got = _ids_on_shards(500, 16, {3, 5, 7, 9, 70, 99})  # the parents' bucket had more
    assert {shard for _, shard in got} == {3, 5, 7, 9}


def test_too_few_wanted_shards_or_all_of_them_draw_once_on_any_shard() -> None:
    for wanted in ({5}, set(range(64)), set()):
        got = _ids_on_shards(2000, 64, wanted)
        assert len(got) == 2000
        assert all(shard == keys.shard_of(text, 64) for text, shard in got)
        assert len({shard for _, shard in got}) > 32  # not held to the few


def test_none_asked_none_made() -> None:
    assert _ids_on_shards(0, 64, {1, 2}) == []
