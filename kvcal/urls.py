"""Engine and Prometheus base URLs given by users, checked before anything is contacted.

A URL is checked as the HTTP client (httpx, then the socket layer's IDNA codec) will
encode it, so that what passes here cannot fail later inside the library: a host that
httpx refuses (``http://1.2.3.999``, an IDNA name it cannot encode) or that the IDNA
codec refuses (an empty or 64-character label, ``http://a..b``) is an input error naming
the flag, in every command that takes a URL and before a k8s Job is rendered with it.
Every message shows the URL through :func:`kvcal.redact.redact_url`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple
from urllib.parse import urlsplit

from kvcal.errors import InputError
from kvcal.redact import redact_url

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HOST_CHARS = 253
"""A DNS name's longest text form (RFC 1035, 2.3.4: 255 octets on the wire)."""
MAX_LABEL_CHARS = 63
_IPV4_STYLE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")


class EngineUrl(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        """What makes two URLs the same engine (host case and a trailing slash do not count)."""
        return self.scheme, self.host.lower().strip("[]"), self.port, self.path.rstrip("/")


def shown(url: str) -> str:
    """A URL as a message quotes it: redacted, then repr'd (control characters escaped)."""
    return repr(redact_url(url))


def check_host(host: str, what: str) -> str:
    """``host`` as the socket layer will encode it (an IP address, or DNS labels of 1-63 characters); its ASCII form."""
    name = host.strip("[]")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    if _IPV4_STYLE.fullmatch(name):  # four numbers look like IPv4: httpx refuses one past 255, so does kvcal
        raise InputError(f"{what}: host {host!r} is not an IPv4 address (each of its four numbers 0-255)")
    try:
        ascii_form = name.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_form = ""
    labels = ascii_form.split(".")
    if labels and labels[-1] == "" and len(labels) > 1:
        labels.pop()  # one trailing dot names the root: allowed
    if not ascii_form or len(ascii_form) > MAX_HOST_CHARS or not all(0 < len(x) <= MAX_LABEL_CHARS for x in labels):
        raise InputError(
            f"{what}: host {host!r} is not a DNS name the HTTP client can look up (each dot-separated label "
            f"1-{MAX_LABEL_CHARS} characters, {MAX_HOST_CHARS} in all) nor an IP address"
        )
    return ascii_form


def _library_host(url: str, flag: str) -> str:
    """The host as httpx parses and encodes it (imported here: only commands that check a URL pay for it)."""
    import httpx

    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 - decoding an A-label ("xn--...") as httpx does for the Host header: it may refuse
        return parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError, ValueError, TypeError) as err:
        reason = str(err).split(":")[0] if isinstance(err, httpx.InvalidURL) else f"{type(err).__name__}: {err}"
        raise InputError(f"{flag}: {shown(url)} is not a URL the HTTP client accepts ({reason})") from None


def parse_engine_url(url: str, flag: str) -> EngineUrl:
    """``http(s)://host[:port][/path]``; anything else is an InputError naming the flag."""
    example = "e.g. http://10.0.0.5:8000"
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InputError(f"{flag}: {shown(url)} is not a URL ({example})")
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as err:
        raise InputError(f"{flag}: {shown(url)} is not a valid URL ({redact_url(str(err))}; {example})") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise InputError(f"{flag}: {shown(url)} must start with http:// or https:// ({example})")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise InputError(f"{flag}: {shown(url)} must be a plain base URL (no credentials, query or fragment)")
    if not host:
        raise InputError(f"{flag}: {shown(url)} has no host ({example})")
    if port == 0:
        raise InputError(f"{flag}: {shown(url)} has port 0 ({example})")
    check_host(_library_host(url, flag), flag)
    return EngineUrl(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], parts.path)


def check_pair_urls(producer: str | None, consumer: str | None) -> None:
    """Both or neither; each well formed; two different engines."""
    if (producer is None) != (consumer is None):
        raise InputError("attach mode needs both --producer-url and --consumer-url")
    if producer is None or consumer is None:
        return
    a, b = parse_engine_url(producer, "--producer-url"), parse_engine_url(consumer, "--consumer-url")
    if a.key == b.key:
        raise InputError(
            f"--producer-url and --consumer-url are the same engine ({redact_url(producer)}); "
            "the pull needs two engines"
        )
