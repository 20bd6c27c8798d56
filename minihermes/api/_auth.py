"""Authentication: every request's RequestContext comes from a JWT or an API key.

JWTs (PyJWT) are verified with an HS256 secret and/or an RS256/ES256 public key; claims ``tenant``,
``namespace`` (optional), ``sub`` (the principal), ``roles`` (list or space-separated string) and ``exp``
(required). ``exp``, ``nbf`` and ``iat`` must be whole seconds since 1970 no later than the year 9999: a
string, a fraction, a flag or a far-off number is refused, not read leniently. API keys are looked up in the
store (see ``_keys``). Only the roles ``admin``, ``user`` and ``viewer`` are taken from a credential: nobody
can claim the runtime's ``system`` role over HTTP. One request carries one credential: both
``Authorization`` and ``X-API-Key`` is a 400 ``ambiguous_credentials``, never a silent choice.

Without an ``AuthConfig`` every request acts as the local owner (tenant ``default``, principal ``local``,
role ``admin``), and the server only binds loopback addresses.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from minihermes.permissions import effective_roles
from minihermes.runtime import DEFAULT_NAMESPACE, DEFAULT_TENANT, InvalidArgument, RequestContext
from minihermes.runtime.store import Store

from ._errors import ApiError, unauthenticated
from ._keys import KEY_PREFIX, RESERVED_PRINCIPALS, ApiKeyError, verify_api_key

log = logging.getLogger("minihermes.api")

LOCAL_OWNER = RequestContext(tenant=DEFAULT_TENANT, principal="local", roles=frozenset({"admin"}))
"""Who every request is when no auth is configured."""

MIN_SECRET_BYTES = 32
_SCOPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_PRINCIPAL = re.compile(r"[^\x00-\x1f\x7f]{1,128}")
_HMAC_ALGORITHMS = ("HS256",)
MAX_NUMERIC_DATE = 253_402_300_799
"""9999-12-31T23:59:59Z: the latest ``exp``/``nbf``/``iat`` accepted."""
_TIME_CLAIMS = ("exp", "nbf", "iat")


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """How callers prove who they are. Give a JWT secret and/or public key, and/or accept API keys.

    - ``jwt_secret``: HS256 shared secret (at least 32 bytes).
    - ``jwt_public_key``: PEM public key for RS256 (RSA), ES256 (EC P-256) or EdDSA tokens.
    - ``issuer`` / ``audience``: required ``iss`` / ``aud`` claims when set (a token carrying an ``aud``
      is refused when no audience is configured: it was minted for someone else).
    - ``leeway``: seconds of clock skew tolerated on ``exp``/``nbf``/``iat``.
    - ``api_keys``: accept keys created with ``create_api_key`` (stored hashed in the node's store).
    """

    jwt_secret: str | None = field(default=None, repr=False)
    jwt_public_key: str | None = None
    issuer: str | None = None
    audience: str | None = None
    leeway: float = 30.0
    api_keys: bool = True

    def __post_init__(self) -> None:
        if not (self.jwt_secret or self.jwt_public_key or self.api_keys):
            raise ValueError("auth: configure a JWT secret, a JWT public key, or API keys")
        if self.jwt_secret is not None and len(self.jwt_secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"auth: the JWT secret must be at least {MIN_SECRET_BYTES} bytes")
        if self.jwt_public_key is not None:
            _asymmetric_algorithms(self.jwt_public_key)  # fails early on a bad key
        if self.leeway < 0:
            raise ValueError("auth: leeway must be >= 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuthConfig | None:
        """From ``MINIHERMES_JWT_SECRET``, ``MINIHERMES_JWT_PUBLIC_KEY_FILE``, ``MINIHERMES_JWT_ISSUER``,
        ``MINIHERMES_JWT_AUDIENCE`` and ``MINIHERMES_API_KEYS`` (``1`` to accept API keys). None when none is
        set (no auth: loopback only)."""
        env = os.environ if environ is None else environ
        secret = env.get("MINIHERMES_JWT_SECRET") or None
        key_file = env.get("MINIHERMES_JWT_PUBLIC_KEY_FILE") or None
        api_keys = env.get("MINIHERMES_API_KEYS", "").lower() in ("1", "true", "yes", "on")
        if not (secret or key_file or api_keys):
            return None
        public_key = None
        if key_file:
            with open(key_file, encoding="utf-8") as f:
                public_key = f.read()
        return cls(
            jwt_secret=secret,
            jwt_public_key=public_key,
            issuer=env.get("MINIHERMES_JWT_ISSUER") or None,
            audience=env.get("MINIHERMES_JWT_AUDIENCE") or None,
            api_keys=api_keys,
        )


class Authenticator:
    """Turns a request's headers into a RequestContext, or raises a 401 ApiError."""

    def __init__(self, config: AuthConfig | None, store: Store) -> None:
        self.config = config
        self._store = store
        self._public_key: Any = None
        self._asymmetric: tuple[str, ...] = ()
        if config is not None and config.jwt_public_key:
            self._public_key = load_pem_public_key(config.jwt_public_key.encode())
            self._asymmetric = _asymmetric_algorithms(config.jwt_public_key)

    @property
    def enabled(self) -> bool:
        return self.config is not None

    async def authenticate(
        self, headers: Mapping[str, str], *, request_id: str, now: float
    ) -> RequestContext:
        config = self.config
        if config is None:
            return RequestContext(
                tenant=LOCAL_OWNER.tenant,
                principal=LOCAL_OWNER.principal,
                roles=LOCAL_OWNER.roles,
                request_id=request_id,
            )
        token = _credential(headers)
        if token.startswith(KEY_PREFIX):
            if not config.api_keys:
                raise unauthenticated("API keys are not accepted by this server")
            try:
                info = await verify_api_key(self._store, token, now=now)
            except ApiKeyError as e:
                raise unauthenticated(e.reason) from None
            except Exception:  # the store is closed or failing: a server problem, not the caller's
                log.warning("API key check failed", exc_info=True)
                raise ApiError(503, "unavailable", "credentials cannot be checked right now") from None
            return _context(info.tenant, info.namespace, info.principal, info.roles, request_id)
        return self._from_jwt(config, token, request_id)

    def _from_jwt(self, config: AuthConfig, token: str, request_id: str) -> RequestContext:
        if not (config.jwt_secret or self._public_key is not None):
            raise unauthenticated("JWTs are not accepted by this server")
        try:
            alg = jwt.get_unverified_header(token).get("alg")
        except jwt.PyJWTError:
            raise unauthenticated("malformed token") from None
        key: Any
        if alg in _HMAC_ALGORITHMS and config.jwt_secret:
            key = config.jwt_secret
        elif alg in self._asymmetric and self._public_key is not None:
            key = self._public_key
        else:
            raise unauthenticated(f"token algorithm {alg!r} is not accepted")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[str(alg)],
                audience=config.audience,
                issuer=config.issuer,
                leeway=config.leeway,
                # the time claims are checked below, strictly typed: PyJWT reads "exp" with int()
                options={
                    "require": ["exp", "sub", "tenant"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.MissingRequiredClaimError as e:
            raise unauthenticated(f"token lacks the '{e.claim}' claim") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise unauthenticated("invalid token") from None
        _check_times(claims, time.time(), config.leeway)
        roles = claims.get("roles", ())
        if isinstance(roles, str):
            roles = roles.split()
        if not isinstance(roles, list | tuple) or not all(isinstance(r, str) for r in roles):
            raise unauthenticated("the 'roles' claim must be a list of strings")
        return _context(
            claims.get("tenant"),
            claims.get("namespace", DEFAULT_NAMESPACE),
            claims.get("sub"),
            roles,
            request_id,
        )


def _check_times(claims: dict[str, Any], now: float, leeway: float) -> None:
    """``exp`` (required), ``nbf`` and ``iat``: integers from 0 to :data:`MAX_NUMERIC_DATE`, then the token's
    validity window around ``now`` (``leeway`` seconds of clock skew either way)."""
    for name in _TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise unauthenticated(
                f"invalid token: the '{name}' claim must be an integer (seconds since 1970), "
                f"not {type(value).__name__}"
            )
        if not 0 <= value <= MAX_NUMERIC_DATE:
            raise unauthenticated(
                f"invalid token: the '{name}' claim must be between 0 and {MAX_NUMERIC_DATE} (the year 9999)"
            )
    if claims["exp"] <= now - leeway:
        raise unauthenticated("token expired")
    if claims.get("nbf", 0) > now + leeway:
        raise unauthenticated("invalid token: not valid yet (its 'nbf' is in the future)")
    if claims.get("iat", 0) > now + leeway:
        raise unauthenticated("invalid token: issued in the future (its 'iat')")


def _credential(headers: Mapping[str, str]) -> str:
    if "authorization" in headers and "x-api-key" in headers:
        raise ApiError(
            400,
            "ambiguous_credentials",
            "send one credential: 'Authorization: Bearer ...' or 'X-API-Key: ...', not both",
        )
    value = headers.get("authorization")
    if value:
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthenticated("use 'Authorization: Bearer <token or API key>'")
        return token.strip()
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    raise unauthenticated("missing credentials: send 'Authorization: Bearer <token or API key>'")


def _context(tenant: Any, namespace: Any, principal: Any, roles: Any, request_id: str) -> RequestContext:
    if not isinstance(tenant, str) or not _SCOPE_NAME.fullmatch(tenant):
        raise unauthenticated("the credential names no valid tenant")
    if not isinstance(namespace, str) or not _SCOPE_NAME.fullmatch(namespace):
        raise unauthenticated("the credential names no valid namespace")
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        raise unauthenticated("the credential names no valid principal")
    if principal in RESERVED_PRINCIPALS:
        # what the runtime does (or did, resuming work) is owned by "system": no credential may claim it
        raise unauthenticated(f"the principal {principal!r} is reserved for the runtime")
    try:
        return RequestContext(
            tenant=tenant,
            namespace=namespace,
            principal=principal,
            roles=effective_roles(roles),
            request_id=request_id,
        )
    except InvalidArgument as e:
        raise unauthenticated(e.message) from None


def _asymmetric_algorithms(pem: str) -> tuple[str, ...]:
    try:
        key = load_pem_public_key(pem.encode())
    except (ValueError, TypeError) as e:
        raise ValueError(f"auth: the JWT public key is not a PEM public key ({e})") from None
    if isinstance(key, rsa.RSAPublicKey):
        return ("RS256", "RS384", "RS512", "PS256")
    if isinstance(key, ec.EllipticCurvePublicKey):
        return ("ES256", "ES384", "ES512")
    if isinstance(key, ed25519.Ed25519PublicKey):
        return ("EdDSA",)
    raise ValueError(f"auth: unsupported JWT public key type {type(key).__name__}")


__all__ = ["LOCAL_OWNER", "AuthConfig", "Authenticator"]
