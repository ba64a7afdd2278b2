"""Snapshot encryption at rest: Fernet keys from settings.SNAPSHOT_KEYS, newest first.

Rotation: prepend a new key to SNAPSHOT_KEYS (new snapshots use it, old ones still decrypt),
run `manage.py snapshot_rotate` to re-encrypt the old ones, then drop the old key.
"""

from __future__ import annotations

import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

__all__ = ["InvalidToken", "current_key_id", "decrypt", "encrypt", "rotate"]


def key_id(key: str) -> str:
    """A short fingerprint that names a key without revealing it."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k) for k in keys])


def _keys() -> tuple[str, ...]:
    return tuple(settings.SNAPSHOT_KEYS)


def current_key_id() -> str:
    return key_id(_keys()[0])


def encrypt(plaintext: bytes) -> bytes:
    return _fernet(_keys()).encrypt(plaintext)


def decrypt(ciphertext: bytes) -> bytes:
    return _fernet(_keys()).decrypt(bytes(ciphertext))


def rotate(ciphertext: bytes) -> bytes:
    """Re-encrypt with the newest key (MultiFernet.rotate keeps the original timestamp)."""
    return _fernet(_keys()).rotate(bytes(ciphertext))
