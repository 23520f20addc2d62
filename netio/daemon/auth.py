"""HTTP basic auth against bcrypt hashes, safe to expose to anyone who can connect.

bcrypt is slow on purpose (about 50-100 ms at cost 10), so:

* it never runs on the event loop: checks go to a small pool of threads of
  their own (bcrypt releases the GIL), at most ``max_concurrent`` at once;
* an attempt that finds every slot busy is answered at once with
  :attr:`AuthResult.BUSY` (the server says 429 and ``Retry-After``) instead of
  queueing, so a flood of wrong passwords costs the daemon at most
  ``max_concurrent`` threads of bcrypt and never delays the loop, the
  watchdog or the collectors;
* a verified (user, password) is remembered (its SHA-256 over user, password
  and stored hash, as the Prometheus exporter toolkit does), so a scraper
  with good credentials pays bcrypt once, not on every scrape, and is served
  while an attack keeps the bcrypt slots busy;
* an unknown user is checked against a decoy hash of the same cost, so it
  takes as long as a known user with a wrong password: the answer time does
  not say which user names exist.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import secrets
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from enum import IntEnum

# bcrypt's base64 alphabet (for the decoy hash's 31 characters of "hash").
_BCRYPT_B64 = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
CACHE_ENTRIES = 256


class AuthResult(IntEnum):
    OK = 0
    DENIED = 1  # 401
    BUSY = 2  # 429: every bcrypt slot is taken; try again later


def default_concurrency() -> int:
    """Half the CPUs, 1 to 4: an attack can take no more than that."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def _normalise(hashed: bytes) -> bytes:
    # htpasswd writes $2y$, which the bcrypt module accepts as $2b$.
    return b"$2b$" + hashed[4:] if hashed.startswith(b"$2y$") else hashed


def _decoy(hashed: bytes) -> bytes:
    """A bcrypt hash of the same cost as ``hashed`` that no password matches
    (a fresh salt, a random digest): checking against it costs the same."""
    import bcrypt

    cost = int(hashed[4:6])
    salt = bcrypt.gensalt(rounds=cost)  # random bytes only, no key stretching
    return salt + "".join(secrets.choice(_BCRYPT_B64) for _ in range(31)).encode()


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against ``users`` (user -> bcrypt hash)."""

    def __init__(self, users: dict[str, bytes], *, max_concurrent: int | None = None,
                 cache_entries: int = CACHE_ENTRIES) -> None:
        self.users = {u: _normalise(h) for u, h in users.items()}
        self.max_concurrent = max_concurrent or default_concurrency()
        # The decoy has the highest cost of the configured hashes.
        costliest = max(self.users.values(), key=lambda h: int(h[4:6]), default=None)
        self._decoy = _decoy(costliest) if costliest is not None else b""
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._cache_entries = cache_entries
        self._in_flight = 0
        self._pool: ThreadPoolExecutor | None = None
        self.busy_answers = 0

    def _parse(self, header: str | None) -> tuple[bytes, bytes] | None:
        if header is None or not header.startswith("Basic "):
            return None
        try:
            raw = base64.b64decode(header[6:].strip(), validate=True)
        except ValueError:
            return None
        user, sep, pw = raw.partition(b":")
        return (user, pw) if sep else None

    async def check(self, header: str | None) -> AuthResult:
        if not self.users:
            return AuthResult.OK
        parsed = self._parse(header)
        if parsed is None:
            return AuthResult.DENIED  # nothing about any user is revealed by a bad header
        user_b, pw = parsed
        hashed = self.users.get(user_b.decode("utf-8", "replace"))
        known = hashed is not None
        target = hashed if hashed is not None else self._decoy
        digest = hashlib.sha256(user_b + b"\0" + pw + b"\0" + target).digest()
        if digest in self._ok:
            self._ok.move_to_end(digest)
            return AuthResult.OK
        if self._in_flight >= self.max_concurrent:
            self.busy_answers += 1
            return AuthResult.BUSY
        self._in_flight += 1
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrent,
                                                thread_name_prefix="netio-bcrypt")
            good = await asyncio.get_running_loop().run_in_executor(
                self._pool, _checkpw, pw, target)
        finally:
            self._in_flight -= 1
        if good and known:
            self._ok[digest] = None
            while len(self._ok) > self._cache_entries:
                self._ok.popitem(last=False)
            return AuthResult.OK
        return AuthResult.DENIED

    def close(self) -> None:
        """Let the bcrypt threads go (checks still running finish first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _checkpw(pw: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(pw, hashed))
    except ValueError:
        return False
