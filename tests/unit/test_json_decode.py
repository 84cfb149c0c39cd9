"""Decoding JSON read back from the database (``polling.common.sql.to_json``).

orjson does the common case; anything it would read differently from the
standard library (integers beyond 64 bits, numbers beyond a double) goes to
``json.loads``: the two must never disagree.
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from polling.common.sql import to_json

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON)
def test_same_as_the_standard_library(value: object) -> None:
    text = json.dumps(value)
    assert to_json(text) == json.loads(text)


def test_big_integers_stay_exact() -> None:
    for number in (2**63, 2**64, -(2**63) - 1, 10**30, -(10**40)):
        decoded = to_json(json.dumps({"n": number}))
        assert decoded == {"n": number}
        assert type(decoded["n"]) is int


def test_numbers_beyond_a_double_read_as_the_standard_library_reads_them() -> None:
    assert math.isinf(to_json("[1e400]")[0])
    assert to_json("1.5e-400") == 0.0


def test_not_text_passes_through_and_empty_object_is_a_new_dict() -> None:
    payload = {"a": 1}
    assert to_json(payload) is payload
    first, second = to_json("{}"), to_json("{}")
    assert first == {} and first is not second


@given(st.integers(min_value=-(10**40), max_value=10**40), st.text(max_size=20))
def test_big_integers_stay_exact_beside_any_text(number: int, words: str) -> None:
    """The run of digits is found in text, bytes, and text that is not ASCII
    (ensure_ascii off: the text is stored as it is)."""
    text = json.dumps({"w": words, "n": number, "é": "ü"}, ensure_ascii=False)
    for value in (text, text.encode()):
        decoded = to_json(value)
        assert decoded == json.loads(text) and type(decoded["n"]) is int
