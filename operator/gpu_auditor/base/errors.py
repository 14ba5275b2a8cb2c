"""Every failure of a Kubernetes request as one class, chosen once from the HTTP status.

As kopf's `_cogs/clients/errors.py`: callers catch a class (`APINotFoundError`, the transient
ones in `TRANSIENT`), never test a status. `reason` is the label the operator's error metric
carries for each class (docs/contracts.md).
"""

from __future__ import annotations


class ConfigError(Exception):
    """No usable Kubernetes config (bad flags, a bad kubeconfig, a failed credential plugin):
    the process exits at start with this message."""


class APIError(Exception):
    """A request the API server refused, or that got no answer. `status` is the HTTP status,
    None when no response came; `body` the response body (a `Status` object, usually)."""

    reason = "error"

    def __init__(self, message: str, *, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class APIConnectionError(APIError):
    """No response: connection refused or reset, TLS failure, timeout."""

    reason = "unavailable"


class APICredentialsError(APIError):
    """The credentials could not be had (an exec plugin failed, or said nothing usable)."""

    reason = "unavailable"


class APIServerError(APIError):
    """5xx."""

    reason = "unavailable"


class APIClientError(APIError):
    """4xx not named below."""


class APIBadRequestError(APIClientError):
    """400 / 422: the server refused the request's content."""

    reason = "invalid"


class APIUnauthorizedError(APIClientError):
    """401: the credentials are missing, wrong or expired."""


class APIForbiddenError(APIClientError):
    """403: RBAC does not allow it."""

    reason = "forbidden"


class APINotFoundError(APIClientError):
    """404: the object (or its namespace, or the resource) does not exist."""

    reason = "not-found"


class APIConflictError(APIClientError):
    """409: the object exists already, or a precondition (a UID, a resourceVersion) failed."""

    reason = "conflict"


class APITooManyRequestsError(APIClientError):
    """429: the server asks to come back later."""

    reason = "unavailable"


TRANSIENT: tuple[type[APIError], ...] = (APIConnectionError, APICredentialsError,
                                         APIServerError, APITooManyRequestsError)
"""Failures worth trying again later (nothing about the request itself is wrong)."""

_BY_STATUS: dict[int, type[APIError]] = {
    400: APIBadRequestError, 401: APIUnauthorizedError, 403: APIForbiddenError,
    404: APINotFoundError, 409: APIConflictError, 422: APIBadRequestError,
    429: APITooManyRequestsError,
}


def from_status(status: int, message: str, body: bytes = b"") -> APIError:
    """The error of a response with HTTP status `status` (>= 400)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = APIServerError if status >= 500 else APIClientError if status >= 400 else APIError
    return cls(f"HTTP {status}: {message}", status=status, body=body)
