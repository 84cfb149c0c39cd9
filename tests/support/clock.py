"""A monotonic clock that moves only when a test says so."""

from __future__ import annotations


class FakeMonotonic:
    """Stands in for ``time`` (``.monotonic()``) or for a ``clock`` callable."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    __call__ = monotonic

    def shift(self, seconds: float) -> None:
        self.now += seconds
