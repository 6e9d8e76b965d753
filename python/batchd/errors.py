"""Exceptions raised by batchd.

Every error from the daemon or the stream is a :class:`BatchdError` carrying
the gRPC status code (``code``, e.g. ``"INVALID_ARGUMENT"``) and the daemon's
message (``message``). Subclasses also derive from the matching built-in
exception, so ``except ValueError`` catches a bad plan and
``except ConnectionError`` a lost daemon.
"""

# absl::StatusCode / grpc::StatusCode numbers.
_CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND", 6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL",
    14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class BatchdError(RuntimeError):
    """An error from batchd: ``code`` (status name) and ``message``."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class InvalidArgumentError(BatchdError, ValueError):
    """The plan or request is wrong; the message says which field to fix."""


class UnavailableError(BatchdError, ConnectionError):
    """The daemon cannot be reached, or the stream to it was lost."""


class DeadlineExceededError(BatchdError, TimeoutError):
    """The daemon did not answer in time."""


class ResourceExhaustedError(BatchdError):
    """The daemon's buffer budget is spent; back off or ask for less."""


class FailedPreconditionError(BatchdError):
    """The call is not valid in the loader's state (e.g. it is closed)."""


class CancelledError(BatchdError):
    """The stream was shut down."""


class UnauthenticatedError(BatchdError, PermissionError):
    """The daemon requires a bearer token, and none or a wrong one was sent
    (``token_file`` or ``BATCHD_TOKEN``)."""


class PermissionDeniedError(BatchdError, PermissionError):
    """The token may not do this: it is bound to another job, or the call
    needs a token bound to no job."""


_CLASSES = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "OUT_OF_RANGE": InvalidArgumentError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "CANCELLED": CancelledError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "PERMISSION_DENIED": PermissionDeniedError,
}


def from_status(code, message):
    """The exception for a status (``code`` as a number or a name)."""
    name = _CODE_NAMES.get(code, str(code)) if isinstance(code, int) else code
    return _CLASSES.get(name, BatchdError)(name, message)
