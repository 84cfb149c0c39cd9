"""New job ids (``scheduling.storage.jobinsert.new_job_ids``): the UUIDs ``uuid.uuid4()`` makes."""

from __future__ import annotations

import pickle
import uuid

from scheduling.storage.jobinsert import new_job_id_texts, new_job_ids


def test_ids_are_version_4_uuids_like_the_standard_librarys() -> None:
    ids = new_job_ids(2000)
    assert len(set(ids)) == 2000
    for value in ids:
        assert type(value) is uuid.UUID
        assert value.version == 4
        assert value.variant == uuid.RFC_4122
        assert value.is_safe is uuid.SafeUUID.unknown
        same = uuid.UUID(str(value))
        assert same == value and hash(same) == hash(value)
        assert uuid.UUID(bytes=value.bytes, version=4) == value  # bits already set
        assert pickle.loads(pickle.dumps(value)) == value


def test_none_asked_none_made() -> None:
    assert new_job_ids(0) == []


def test_id_texts_are_version_4_uuids_in_canonical_text() -> None:
    texts = new_job_id_texts(4000)
    assert len(set(texts)) == 4000
    for text in texts:
        value = uuid.UUID(text)
        assert str(value) == text  # lowercase, hyphenated: the form hashed for the shard
        assert value.version == 4
        assert value.variant == uuid.RFC_4122
    # every variant nibble occurs (8, 9, a, b) and only those
    assert {text[19] for text in texts} == set("89ab")
    assert new_job_id_texts(0) == []
