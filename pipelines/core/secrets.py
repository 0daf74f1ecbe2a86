"""Credentials out of every output: one function, :func:`redact`, that every place which shows a URI, a command
line or an error's text passes it through (console lines, logs, MLflow tags, files under ``work_dir``).

What counts as a credential:

* the password of a URI's user information, ``scheme://user:PASSWORD@host`` (a form MLflow's client, SQLAlchemy
  and requests accept): the password becomes ``***``, the user stays (it says which account was used);
* the value of a query parameter that carries a secret (``token``, ``access_token``, ``password``, ``secret``,
  ``sig``/``signature``, ``X-Amz-Signature``, ``X-Amz-Security-Token``, ``api_key``, ``apikey``, ``key``, ``sas``
  and ``auth``): ``***``.

A URI with a password still works where it is used (it is only its printed form that changes); the MLflow client
reads credentials from ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (or ``MLFLOW_TRACKING_TOKEN``)
as well, which keeps them off the command line, where ``ps`` shows them (docs/how-to/credentials.md).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

#: ``scheme://user:password@``: the password is what is masked; a user without a password is left as it is.
#: The password runs to the authority's last ``@`` (as urllib splits it: ``p@ss`` in ``u:p@ss@host``).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@'\"]*:)(?P<pw>[^\s/?#'\"]*)(?P<at>@)")
#: A query parameter that carries a secret (case-insensitive), up to the next separator.
_QUERY = re.compile(
    r"(?i)(?P<head>[?&;](?:token|access_token|auth|password|passwd|pwd|secret|api_key|apikey|key|sas|sig|signature"
    r"|x-amz-signature|x-amz-security-token|x-goog-signature)=)(?P<value>[^&;\s'\"#]+)"
)


def redact(text: object) -> str:
    """``text`` (any object, as ``str()``) with every credential of a URI in it masked (see the module)."""
    s = str(text)
    if "://" not in s and "=" not in s:
        return s
    s = _USERINFO.sub(lambda m: m["head"] + MASK + m["at"] if m["pw"] else m[0], s)
    return _QUERY.sub(lambda m: m["head"] + MASK, s)


def has_secret(text: object) -> bool:
    """Whether :func:`redact` would mask anything in ``text``."""
    return redact(text) != str(text)


def browser_address(uri: str) -> str:
    """The address of a tracking server to open in a browser: ``uri`` without user information, query or fragment
    (a browser asks for the credentials itself), and without a trailing slash."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")


class RedactingFormatter(logging.Formatter):
    """A formatter whose every line (message, arguments and traceback alike) goes through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingFilter(logging.Filter):
    """A filter for handlers that are not ours (MLflow's own): the record's message and its exception's text
    redacted, so a formatter of theirs prints no credential."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None and has_secret(record.exc_info[1]):
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def guard_logger(name: str) -> None:
    """Add a :class:`RedactingFilter` to every handler of logger ``name`` (once)."""
    for handler in logging.getLogger(name).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
