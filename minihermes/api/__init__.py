"""The MiniHermes HTTP API (docs/http-api.md).

Every actor op is ``POST /api/v1/actors/{actor}/{op}`` with the op's arguments as a JSON object::

    from minihermes.api import AuthConfig, create_app, serve_http

    app = create_app(node, AuthConfig(jwt_secret=...))          # an ASGI app over a running node
    await serve_http(node, "127.0.0.1", 8091, auth=None, stop=stop_event)

API keys live (hashed) in the node's store: ``create_api_key``, ``list_api_keys``, ``revoke_api_key``.
"""

from minihermes.permissions import DEFAULT_PERMISSIONS, ROLES, PermissionTable

from ._app import create_app
from ._auth import LOCAL_OWNER, AuthConfig
from ._core import LOOPBACK_HOSTS, ApiState
from ._errors import ApiError
from ._keys import (
    KEY_SCOPE,
    ApiKeyError,
    ApiKeyInfo,
    NewApiKey,
    create_api_key,
    list_api_keys,
    revoke_api_key,
    verify_api_key,
)
from ._logging import JsonFormatter, use_json_logs
from ._server import InsecureBindError, bind_http, check_bind, is_loopback, local_url, serve_http
from ._shedding import SheddingConfig

__all__ = [
    "DEFAULT_PERMISSIONS",
    "KEY_SCOPE",
    "LOCAL_OWNER",
    "LOOPBACK_HOSTS",
    "ROLES",
    "ApiError",
    "ApiKeyError",
    "ApiKeyInfo",
    "ApiState",
    "AuthConfig",
    "InsecureBindError",
    "JsonFormatter",
    "NewApiKey",
    "PermissionTable",
    "SheddingConfig",
    "bind_http",
    "check_bind",
    "create_api_key",
    "create_app",
    "is_loopback",
    "list_api_keys",
    "local_url",
    "revoke_api_key",
    "serve_http",
    "use_json_logs",
    "verify_api_key",
]
