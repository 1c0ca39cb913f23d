"""Errors: one class per API error code, all under :class:`TetherError`."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class TetherError(Exception):
    """An error answered by a tether server (or met on the way to one).

    ``code`` is the API's machine-readable code (``"not_found"``, ...),
    ``status`` the HTTP status (0 when no answer came), ``message`` the
    server's text.
    """

    code: str = "unknown"

    def __init__(self, message: str, *, status: int = 0, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(TetherError):
    """400: malformed JSON, an unknown field or a bad value."""

    code = "invalid_argument"


class Unauthenticated(TetherError):
    """401: a missing, unknown or revoked key."""

    code = "unauthenticated"


class PermissionDenied(TetherError):
    """403: the key lacks the scope (e.g. an admin route)."""

    code = "permission_denied"


class NotFound(TetherError):
    """404: no such job, schedule, tenant or key in this tenant; unknown route."""

    code = "not_found"


class MethodNotAllowed(TetherError):
    """405: a known route with the wrong method."""

    code = "method_not_allowed"


class AlreadyExists(TetherError):
    """409: a name that is taken (tenant, schedule)."""

    code = "already_exists"


class LeaseLost(TetherError):
    """409: the lease token no longer owns the job (another owner fenced it out)."""

    code = "lease_lost"


class InvalidState(TetherError):
    """409: the job or tenant is not in a state that allows this."""

    code = "invalid_state"


class PayloadTooLarge(TetherError):
    """413: body, payload or result above the server's limit."""

    code = "payload_too_large"


class UnsupportedMediaType(TetherError):
    """415: a body that is not JSON."""

    code = "unsupported_media_type"


class TooManyRequests(TetherError):
    """429: the tenant already holds as many event streams open as the server
    allows (``GET /v1/events``); retry after closing one."""

    code = "too_many_requests"


class Unavailable(TetherError):
    """503: the database (or server) is unreachable right now; safe to retry."""

    code = "unavailable"


class TransportError(Unavailable):
    """No answer at all: connection refused or reset, timeout, DNS failure.

    A subclass of :class:`Unavailable`, so ``except Unavailable`` covers both.
    Unlike a 503, the request may or may not have taken effect.
    """

    code = "transport"


class Internal(TetherError):
    """500: an unexpected storage failure on the server."""

    code = "internal"


class DecodeError(TetherError):
    """A success answer whose body is not what the API documents (not JSON,
    a field missing): a server and SDK out of step, or something in between.
    Not an API code: the server never answers it."""

    code = "decode"


ERRORS_BY_CODE: Dict[str, Type[TetherError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        MethodNotAllowed,
        AlreadyExists,
        LeaseLost,
        InvalidState,
        PayloadTooLarge,
        UnsupportedMediaType,
        TooManyRequests,
        Unavailable,
        Internal,
    )
}

_BY_STATUS: Dict[int, Type[TetherError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: TooManyRequests,
    500: Internal,
    503: Unavailable,
}


def error_from(code: Optional[str], message: str, status: int = 0) -> TetherError:
    """The exception for an API error code (a plain :class:`TetherError` for
    a code this SDK does not know)."""
    cls = ERRORS_BY_CODE.get(code or "")
    if cls is None:
        cls = _BY_STATUS.get(status, TetherError)
        if code is None:
            return cls(message, status=status)
        return cls(message, status=status, code=code)
    return cls(message, status=status)


def error_from_body(status: int, body: Any, text: str) -> TetherError:
    """The exception for an error answer (``{"error": {code, message}}``)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        return error_from(str(err.get("code")), str(err.get("message", "")), status)
    return error_from(None, text.strip()[:500] or f"HTTP {status}", status)
