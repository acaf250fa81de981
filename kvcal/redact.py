"""URLs as kvcal shows them: user info and credential-like query values masked, wherever a URL is printed or stored.

A URL a user gives may carry a secret: a password or a token as the user name
(``http://user:pass@host``, ``http://TOKEN@host``) or a query value (``?token=...``,
``&X-Amz-Signature=...``). kvcal refuses such URLs where it needs a plain base URL, but the
refusal, a log line, a record or a progress line must not repeat the secret: CI logs keep
it. :func:`redact_url` masks one URL; :func:`redact_text` masks every URL inside a
message (the CLI's error and warning lines and its log lines pass through it, so a
message built from a library's error text is covered too).

What is masked: everything before the last ``@`` of the authority (with or without a
scheme), and the value of every query or fragment parameter whose name contains one of
:data:`SECRET_WORDS` (case-insensitive, percent-decoding the name first). The scheme,
host, port, path and the other parameters stay, so the message still says which server
it means.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
SECRET_WORDS = (
    "token",
    "key",
    "secret",
    "pass",
    "pwd",
    "auth",
    "sig",
    "credential",
    "session",
    "cookie",
    "bearer",
    "jwt",
    "private",
    "otp",
)
_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL inside a message: a scheme and what follows up to white space or a quote or bracket around it.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*")
# A credential-like parameter outside a URL with a scheme (``host:80/?token=x``, a query quoted alone).
_PARAM_IN_TEXT = re.compile(r"([?&;#][^\s=&;#'\"]*=)([^\s&;#'\"<>]*)")


def _params(text: str) -> str:
    """``a=1&token=x`` with each credential-like value masked (``&`` and ``;`` both separate)."""
    out = []
    for part in re.split(r"([&;])", text):
        name, equals, value = part.partition("=")
        out.append(f"{name}={MASK}" if equals and value and _SECRET_NAME.search(unquote(name)) else part)
    return "".join(out)


def redact_url(url: str) -> str:
    """``url`` with its user info and credential-like parameter values masked (module docstring)."""
    found = _SCHEME.match(url)
    head, rest = (url[: found.end()], url[found.end() :]) if found else ("", url)
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    cut = rest.find("/")
    authority, path = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    if "@" in authority:
        authority = MASK + "@" + authority.rpartition("@")[2]
    return head + authority + path + question + _params(query) + hash_ + _params(fragment)


def _param(found: re.Match[str]) -> str:
    name, value = found.group(1), found.group(2)
    return name + MASK if value and _SECRET_NAME.search(unquote(name[1:-1])) else found.group()


def redact_text(text: str) -> str:
    """Every URL in ``text`` redacted, and credential-like ``?name=value`` parameters outside one."""
    masked = _URL_IN_TEXT.sub(lambda found: redact_url(found.group()), text)
    return _PARAM_IN_TEXT.sub(_param, masked)
