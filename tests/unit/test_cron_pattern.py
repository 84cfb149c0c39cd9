"""The schema's cron pattern (api/contract.py) against cronsim: whatever the pattern
admits cronsim accepts (the server refuses the rest with the same pattern, so the
schema and the server agree), and the spellings crontab(5) users write are admitted."""

from __future__ import annotations

import random
import re
from datetime import datetime

import pytest
from cronsim import CronSim, CronSimError

from scheduling.api import contract

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
SAMPLES = 4000


def _value(rng: random.Random, low: int, high: int, names: list[str] | None) -> str:
    value = rng.randint(low, high)
    if names and value - low < len(names) and rng.random() < 0.3:
        name = names[value - low]
        return rng.choice([name, name.upper(), name.title()])
    return str(value)


def _term(rng: random.Random, low: int, high: int, names: list[str] | None) -> str:
    roll = rng.random()
    step = f"/{rng.randint(0, high + 1)}" if rng.random() < 0.3 else ""
    if roll < 0.15:
        return "*" + step
    if low == 1 and high == 31 and roll < 0.45:  # days 30 and 31: the hard case
        return rng.choice(["30", "31", "30-31"]) + step
    first = _value(rng, low, high, names)
    if roll < 0.6:
        return first + step
    return f"{first}-{_value(rng, low, high, names)}{step}"


def _field(rng: random.Random, low: int, high: int, names: list[str] | None = None) -> str:
    return ",".join(_term(rng, low, high, names) for _ in range(rng.choice([1, 1, 2, 3])))


def _cronsim_accepts(expression: str) -> bool:
    try:
        CronSim(expression, datetime(2000, 1, 1))
    except (CronSimError, ValueError, KeyError, IndexError):
        return False
    return True


def test_whatever_the_pattern_admits_cronsim_accepts() -> None:
    pattern = re.compile(contract.cron_pattern())
    rng = random.Random(30)
    admitted = 0
    for _ in range(SAMPLES):
        expression = " ".join(
            [
                _field(rng, 0, 59),
                _field(rng, 0, 23),
                _field(rng, 1, 31),
                _field(rng, 1, 12, MONTHS),
                _field(rng, 0, 7, DAYS),
            ]
        )
        if pattern.match(expression):
            admitted += 1
            assert _cronsim_accepts(expression), expression
    assert admitted > SAMPLES // 20  # the sample reached the pattern's many shapes


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * * mon-fri",
        "0 9 * * MON-FRI",
        "0 9 * * Mon-Fri",
        "0 9 * jan,Feb,MAR *",
        "0 9 31 1,3,5 *",
        "0 9 31 */2 *",
        "0 9 30 1-2 *",
        "0 9 31 4 1",
        "0 9 30,1 2 *",
        "*/15 9-17 * * 1-5",
        "5/10 * * * *",
    ],
)
def test_the_pattern_admits_what_crontab_users_write(expression: str) -> None:
    assert re.match(contract.cron_pattern(), expression)
    assert _cronsim_accepts(expression)


@pytest.mark.parametrize("expression", ["0 9 31 4 *", "0 9 30 2 *", "0 9 31 2,4 *", "0 9 31 apr *"])
def test_a_day_no_listed_month_has_is_refused(expression: str) -> None:
    assert not re.match(contract.cron_pattern(), expression)
    assert not _cronsim_accepts(expression)
