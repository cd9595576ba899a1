"""The errors the application raises where a request cannot be answered: named by what
went wrong, each with the HTTP status app/main.py's one handler answers it with, as
`{"detail": ...}`. Code outside the routes raises these, never HTTP's own exceptions (the
CLI reads them too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class AttnvizError(Exception):
    """A request that cannot be answered as asked: `detail` says why, to its client;
    `headers` go with the answer (e.g. Retry-After)."""

    status: ClassVar[int] = 500

    def __init__(self, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = dict(headers) if headers is not None else None

    def __reduce__(self) -> tuple[type[AttnvizError], tuple[str, dict[str, str] | None]]:
        return type(self), (self.detail, self.headers)  # (whole across processes: Ray)


class CannotServe(AttnvizError):
    """The input is read but cannot be served: out of range, too long or too large an
    answer, or a model that does not do what is asked."""

    status = 422


class TooLarge(AttnvizError):
    """The input is larger than the server reads (an image's bytes or pixels): refused
    before it is decoded."""

    status = 413


class NotFound(AttnvizError):
    """No such thing here: an unknown model, a corpus run not (or no longer) kept."""

    status = 404


class NotAllowed(AttnvizError):
    """Only someone else may do this (a corpus run's owner)."""

    status = 403


class OverClientLimit(AttnvizError):
    """This client has as much under way as one client may: retry after Retry-After."""

    status = 429


class Busy(AttnvizError):
    """The server is full (or preparing something) now: retry after Retry-After."""

    status = 503


class Unavailable(AttnvizError):
    """What is asked cannot be had now: a model that failed to load or does not fit."""

    status = 503
