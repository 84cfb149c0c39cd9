"""New job ids (``scheduling.services._new_ids``): the UUIDs ``uuid.uuid4()`` makes."""

from __future__ import annotations

import pickle
import uuid

from scheduling.services import _new_ids


def test_ids_are_version_4_uuids_like_the_standard_librarys() -> None:
    ids = _new_ids(2000)
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
    assert _new_ids(0) == []
