"""Engine base URLs given by users, checked before anything is contacted."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from kvcal.errors import InputError

DEFAULT_PORTS = {"http": 80, "https": 443}


class EngineUrl(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        """What makes two URLs the same engine (host case and a trailing slash do not count)."""
        return self.scheme, self.host.lower().strip("[]"), self.port, self.path.rstrip("/")


def parse_engine_url(url: str, flag: str) -> EngineUrl:
    """``http(s)://host[:port][/path]``; anything else is an InputError naming the flag."""
    example = "e.g. http://10.0.0.5:8000"
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InputError(f"{flag}: {url!r} is not a URL ({example})")
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as err:
        raise InputError(f"{flag}: {url!r} is not a valid URL ({err}; {example})") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise InputError(f"{flag}: {url!r} must start with http:// or https:// ({example})")
    if not host:
        raise InputError(f"{flag}: {url!r} has no host ({example})")
    if port == 0:
        raise InputError(f"{flag}: {url!r} has port 0 ({example})")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise InputError(f"{flag}: {url!r} must be a plain base URL (no credentials, query or fragment)")
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
            f"--producer-url and --consumer-url are the same engine ({producer}); the pull needs two engines"
        )
