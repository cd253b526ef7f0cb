"""Errors a user can fix: a file, an option or data they gave is wrong.

The library raises :class:`UserError` (a ``ValueError``) where such a mistake is detected, with a
message that says what is wrong and what to do; the command line prints it as one line,
``byoc-int8: error: <message>``, and exits with status 2.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in what the user gave: the message names it and says what to do."""


class CalibrationDataError(UserError):
    """Calibration or evaluation inputs that cannot be used: unreadable, empty, not finite, or
    not of the model's input shape."""


class ModelImportError(RuntimeError):
    """The model could not be captured or translated."""


class ToolchainError(RuntimeError):
    """The C toolchain that builds a module (the compiler, ``ld``, ``objcopy``) is missing or
    failed: the message names the tool, and its output."""


class ModelFileError(UserError, ModelImportError):
    """A model file that is missing, unreadable, or declares something byoc-int8 refuses (a
    tensor too large, a negative dimension, content that would run code when loaded)."""


def shown(text: object, limit: int = 80) -> str:
    """A name taken from a model file, quoted for a one-line message: control characters, quotes
    and non-ASCII escaped (Python's ``ascii``), cut to `limit` characters."""
    quoted = ascii(str(text))
    return quoted if len(quoted) <= limit else quoted[: limit - 4] + "...'"
