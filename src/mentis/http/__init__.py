"""HTTP transport: one ASGI app with /mcp (streamable HTTP), /v1 REST, /v1/openapi.json and /health."""

from mentis.http.app import DEFAULT_BIND, HttpConfig, build_app, is_loopback, listen, parse_bind, server

__all__ = ["DEFAULT_BIND", "HttpConfig", "build_app", "is_loopback", "listen", "parse_bind", "server"]
