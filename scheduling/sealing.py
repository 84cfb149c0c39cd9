"""Secrets kept encrypted at rest: a job's header values (``scheduling.jobs.requests``).

Fernet tokens through ``MultiFernet`` with the keys of SENDLATER_ENCRYPTION_KEYS: the
first key encrypts, every key decrypts, so a rotation is "put the new key first, run
``manage.py reencrypt_headers``, then drop the old key". Settings refuse a production
start without a key (``sendlater_site/settings.py``), as for SECRET_KEY.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

__all__ = ["InvalidToken", "reseal", "seal", "unseal"]


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    # Building a Fernet decodes its key: once per key list, not per job.
    return MultiFernet([Fernet(key) for key in keys])


def _current() -> MultiFernet:
    return _fernet(tuple(settings.SENDLATER_ENCRYPTION_KEYS))


def seal(text: str) -> str:
    """``text`` encrypted with the first key (a Fernet token, ASCII)."""
    return _current().encrypt(text.encode()).decode("ascii")


def unseal(token: str) -> str:
    """The text of a token sealed with any of the keys; InvalidToken if none opens it."""
    return _current().decrypt(token.encode("ascii")).decode()


def reseal(token: str) -> str:
    """The token sealed again with the first key (after a rotation)."""
    return _current().rotate(token.encode("ascii")).decode("ascii")


def key_generate() -> str:
    """A new key for SENDLATER_ENCRYPTION_KEYS."""
    return Fernet.generate_key().decode("ascii")
