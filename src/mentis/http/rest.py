"""The REST API: ``POST /v1/<operation>`` for every operation in :data:`mentis.service.operations.OPERATIONS`.

The request body is the operation's input model as JSON, the response its output model. Errors are
``{"error": {"code", "message", "field"?}}`` with the error class's ``http_status``
(:mod:`mentis.errors` holds the one table). ``/v1/openapi.json`` is generated from the same models.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio.to_thread
import orjson
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import Response

from mentis.api.common import parse
from mentis.errors import InvalidInput, MentisError
from mentis.service.memory import Caller, Memory
from mentis.service.operations import Operation
from mentis.service.tokens import CALLER_SCOPE_KEY
from mentis.version import __version__

log = logging.getLogger(__name__)

OTHER_ERRORS: Mapping[int, tuple[str, str]] = {
    400: ("malformed_json", "the request body is not JSON"),
    401: ("unauthorized", "a valid bearer token is required"),
    403: ("forbidden", "forbidden"),
    404: ("no_such_route", "no such route"),
    405: ("method_not_allowed", "method not allowed"),
    413: ("body_too_large", "the request body is too large"),
    415: ("unsupported_media_type", "send the body as Content-Type: application/json"),
    421: ("misdirected", "the Host header names a host this server does not serve"),
    429: ("rate_limited", "too many requests"),
    500: ("internal", "internal error; see the server log"),
    504: ("timeout", "the request took too long"),
}
"""Codes of the errors the HTTP layer itself produces (documented in the OpenAPI document)."""


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    error: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return Response(
        orjson.dumps({"error": error}), status_code=status, headers=headers, media_type="application/json"
    )


def mentis_error_response(exc: MentisError) -> Response:
    return error_response(exc.http_status, exc.code, exc.message, field=getattr(exc, "field", None))


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _call(op: Operation, memory: Memory, caller: Caller, data: dict[str, Any]) -> bytes:
    result = op.call(memory, caller, parse(op.input, data))
    return result.model_dump_json().encode()


def endpoint(op: Operation, memory: Memory) -> Callable[[Request], Awaitable[Response]]:
    """The handler of ``POST /v1/<op.name>``: parse, call in a worker thread, format."""

    async def handle(request: Request) -> Response:
        caller = request.scope.get(CALLER_SCOPE_KEY)
        if not isinstance(caller, Caller):  # the auth middleware always attaches one
            return error_response(401, "unauthorized", "this request carries no authenticated caller")
        if not _is_json(request.headers.get("content-type", "")):
            return error_response(415, *OTHER_ERRORS[415])
        raw = await request.body()
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            hint = "send {} when there are no fields" if not raw.strip() else str(exc)
            return error_response(400, "malformed_json", f"the request body is not JSON: {hint}")
        if not isinstance(data, dict):
            return error_response(
                422, InvalidInput.code, f"the body must be a JSON object of {op.name}'s fields", field="input"
            )
        try:
            body = await anyio.to_thread.run_sync(_call, op, memory, caller, data, abandon_on_cancel=True)
        except MentisError as exc:
            return mentis_error_response(exc)
        except Exception:
            log.exception("%s failed", op.name)
            return error_response(500, *OTHER_ERRORS[500])
        return Response(body, media_type="application/json")

    handle.__name__ = op.name
    return handle


# ---------------------------------------------------------------- OpenAPI

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "additionalProperties": False,
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "machine-readable, e.g. invalid_input"},
                "message": {"type": "string", "description": "what happened and what to do"},
                "field": {"type": "string", "description": "the offending field, when one is known"},
            },
        }
    },
}
_ERROR_STATUSES = (400, 401, 403, 404, 409, 413, 415, 421, 422, 429, 500, 502, 503, 504)
_DESCRIPTIONS = {
    400: "malformed JSON, or recall SQL that was refused or failed",
    401: "no valid bearer token",
    403: "the token's scope does not allow the call, or a disallowed Origin",
    404: "no such attempt, task or repository",
    409: "the call contradicts what is stored",
    413: "the body is larger than the server's limit",
    415: "the body is not application/json",
    421: "the Host header is not one this server serves",
    422: "a field broke a rule; nothing was written",
    429: "rate limited; retry after the Retry-After seconds",
    500: "the store does not verify, or an internal error",
    502: "the embedding provider failed",
    503: "the database is unavailable (locked, full or damaged)",
    504: "the request took longer than the server's timeout",
}


def _responses(ok: dict[str, Any], statuses: Iterable[int]) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    out: dict[str, Any] = {"200": ok}
    for status in statuses:
        out[str(status)] = {"description": _DESCRIPTIONS[status], "content": error}
    return out


def openapi(operations: Iterable[Operation]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the REST API, generated from the operations' models."""
    ops = list(operations)
    pairs: list[tuple[type[BaseModel], Any]] = [(op.input, "validation") for op in ops]
    pairs += [(op.output, "serialization") for op in ops]
    refs, defs = models_json_schema(pairs, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    schemas["Error"] = _ERROR_SCHEMA
    paths: dict[str, Any] = {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness check (no token needed).",
                "security": [],
                "responses": {
                    "200": {
                        "description": "the server is up",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    }
    for op in ops:
        ok = {
            "description": "the operation's result",
            "content": {"application/json": {"schema": refs[(op.output, "serialization")]}},
        }
        paths[f"/v1/{op.name}"] = {
            "post": {
                "operationId": op.name,
                "summary": op.description.split(". ", 1)[0].rstrip(".") + ".",
                "description": op.description,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": refs[(op.input, "validation")]}},
                },
                "responses": _responses(ok, _ERROR_STATUSES),
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Mentis",
            "version": __version__,
            "description": "A hash-chained memory of what coding agents tried. Every operation is also "
            "an MCP tool at /mcp.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
