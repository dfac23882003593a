"""Every activity's bearer token checked as the Bot Framework requires ("Authenticate requests
from the Bot Connector service to your bot").

The token is a JWT that the Bot Connector signs (RS256) with one of the keys its OpenID
metadata (``TEAMS_OPENID_METADATA_URL``) publishes at ``jwks_uri``. It is accepted when:

- the header is ``Authorization: Bearer <token>``;
- the key that signed it is published and endorsed for the ``msteams`` channel (when the key
  lists endorsements);
- its issuer is the metadata's (``https://api.botframework.com``), its audience the bot's app
  id, and it is within its ``nbf`` / ``exp`` with at most :data:`LEEWAY` seconds of clock skew;
- its ``serviceurl`` claim is the activity's ``serviceUrl`` (trailing slash aside): the bot
  sends its own token to that URL, so an activity must not choose it.

The metadata and the keys are fetched with the app's HTTP client, not on each request: the
keys are kept for :data:`KEYS_FOR` seconds, and a token signed with a key not known yet
makes one new fetch at most every :data:`REFETCH_AFTER` seconds (the Bot Framework rolls its
keys; a forger's ``kid`` must not make us fetch on every request). PyJWT verifies the
signature and the time claims. (The Teams SDK's own validator fetches keys with blocking
``urllib`` calls inside the event loop and guesses the keys' URL from the metadata's, so it is
not used.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

log = logging.getLogger(__name__)

#: Seconds of clock skew tolerated on ``nbf`` and ``exp`` (the Bot Framework's five minutes).
LEEWAY = 300
#: Seconds the signing keys are kept before they are fetched again.
KEYS_FOR = 24 * 3600
#: Least seconds between two fetches caused by a key we do not know.
REFETCH_AFTER = 300
#: The channel the keys must be endorsed for.
CHANNEL = "msteams"
#: Bytes of a metadata or keys document read at most.
MAX_DOCUMENT_BYTES = 256 * 1024


class Unauthenticated(Exception):
    """The activity is not from the Bot Connector (answered 401; the message says why)."""


@dataclass(frozen=True)
class _Key:
    key: Any  # the public key PyJWT verifies with
    endorsements: frozenset[str] | None


@dataclass(frozen=True)
class _Keys:
    issuer: str
    keys: dict[str, _Key]
    fetched_at: float


class ActivityAuth:
    """Checks the bearer token of each activity (:meth:`verify`)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        metadata_url: str,
        app_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._http = http
        self._metadata_url = metadata_url
        self._app_id = app_id
        self._clock = clock
        self._keys: _Keys | None = None
        self._last_fetch = float("-inf")
        self._lock = asyncio.Lock()

    async def verify(self, authorization: str | None, service_url: str) -> dict[str, Any]:
        """The token's claims; raises :class:`Unauthenticated`. Network failures fetching the
        keys raise ``httpx.HTTPError`` (the caller answers 503: Teams retries)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("no bearer token")
        token = token.strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the token is not a JWT") from None
        if header.get("alg") != "RS256":
            raise Unauthenticated(f"the token's algorithm is {header.get('alg')!r}, not RS256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("the token names no signing key")
        keys, key = await self._key(kid)
        if key is None:
            raise Unauthenticated("the token is signed with a key the metadata does not publish")
        if key.endorsements is not None and CHANNEL not in key.endorsements:
            raise Unauthenticated(f"the signing key is not endorsed for {CHANNEL}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                audience=self._app_id,
                issuer=keys.issuer,
                leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"the token is not valid ({exc})") from None
        signed_for = claims.get("serviceurl")
        if not isinstance(signed_for, str) or not _same_url(signed_for, service_url):
            raise Unauthenticated("the token was not issued for the activity's serviceUrl")
        return claims

    async def _key(self, kid: str) -> tuple[_Keys, _Key | None]:
        async with self._lock:
            keys = self._keys
            now = self._clock()
            # Stale keys, or a key not known yet, are fetched again at most every
            # REFETCH_AFTER seconds: while the metadata is down the old keys keep serving,
            # instead of every activity waiting on a fetch.
            due = now - self._last_fetch > REFETCH_AFTER
            stale = keys is not None and now - keys.fetched_at > KEYS_FOR
            unknown = keys is not None and kid not in keys.keys
            if keys is None or ((stale or unknown) and due):
                self._last_fetch = now
                try:
                    keys = self._keys = await self._fetch(now)
                except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
                    if keys is None:
                        raise httpx.HTTPError(f"the Bot Framework's keys: {exc}") from exc
                    log.warning("teams: the signing keys could not be refreshed (%s)", exc)
            assert keys is not None
            return keys, keys.keys.get(kid)

    async def _fetch(self, now: float) -> _Keys:
        metadata = await self._document(self._metadata_url)
        issuer, jwks_uri = metadata.get("issuer"), metadata.get("jwks_uri")
        if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
            raise ValueError("the OpenID metadata has no issuer or jwks_uri")
        found = await self._document(jwks_uri)
        listed = found.get("keys")
        if not isinstance(listed, list):
            raise ValueError("the keys document has no keys")
        keys: dict[str, _Key] = {}
        for entry in listed:
            if not isinstance(entry, dict) or entry.get("kty") != "RSA":
                continue
            kid = entry.get("kid")
            try:
                public = jwt.PyJWK.from_dict(entry, algorithm="RS256").key
            except (jwt.PyJWTError, ValueError, TypeError):
                continue
            endorsed = entry.get("endorsements")
            endorsements = (
                frozenset(str(e) for e in endorsed) if isinstance(endorsed, list) else None
            )
            if isinstance(kid, str):
                keys[kid] = _Key(public, endorsements)
        log.info("teams: %d signing keys from %s", len(keys), jwks_uri)
        return _Keys(issuer, keys, now)

    async def _document(self, url: str) -> dict[str, Any]:
        response = await self._http.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > MAX_DOCUMENT_BYTES:
            raise ValueError(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
        value = json.loads(response.content)
        if not isinstance(value, dict):
            raise ValueError(f"{url} is not a JSON object")
        return value


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")
