"""A sink's signing secrets (``polling.dispatch.team_secrets.SecretsCache``): one lookup
a second for the teams it signs for, a rotation signing every delivery a second on."""

from __future__ import annotations

from polling.dispatch.team_secrets import SecretsCache


class Lookup:
    def __init__(self, secrets: dict[int, list[str]]) -> None:
        self.secrets = secrets
        self.asked: list[set[int]] = []

    def __call__(self, team_ids) -> dict[int, list[str]]:
        asked = set(team_ids)
        self.asked.append(asked)
        return {t: list(self.secrets[t]) for t in asked if t in self.secrets}


def test_each_team_is_looked_up_once_a_second_and_a_rotation_signs_after_it() -> None:
    now = [100.0]
    lookup = Lookup({1: ["a"], 2: ["b"]})
    cache = SecretsCache(lookup, seconds=1.0, clock=lambda: now[0])
    assert cache([1]) == {1: ["a"]}
    assert cache([1, 2]) == {1: ["a"], 2: ["b"]}  # only team 2 was asked for
    now[0] += 0.5
    lookup.secrets[1] = ["a2", "a"]  # rotated: both signatures from now on
    assert cache([1, 2]) == {1: ["a"], 2: ["b"]}  # within the second: as read
    assert lookup.asked == [{1}, {2}]
    now[0] += 0.6
    assert cache([2, 1]) == {1: ["a2", "a"], 2: ["b"]}  # read again, in one lookup
    assert lookup.asked[-1] == {1, 2}


def test_a_team_the_lookup_does_not_know_has_no_secret_and_is_not_asked_again() -> None:
    lookup = Lookup({1: ["a"]})
    cache = SecretsCache(lookup, clock=lambda: 5.0)
    assert cache([1, 9]) == {1: ["a"], 9: []}
    assert cache([9]) == {9: []}
    assert len(lookup.asked) == 1
