"""The base helpers for what kvcal shows of what others sent: URL redaction, terminal escaping, URL checks (issue 55)."""

from __future__ import annotations

import pytest

from kvcal.errors import InputError, one_line
from kvcal.redact import redact_text, redact_url
from kvcal.terminal_text import flattened, json_visible, visible
from kvcal.urls import check_host, parse_engine_url

SECRET = "s3cr3t"


@pytest.mark.parametrize("url, shown", [
    (f"http://user:{SECRET}@h:80/p", "http://***@h:80/p"),
    (f"http://{SECRET}@h", "http://***@h"),
    (f"user:{SECRET}@h:8000", "***@h:8000"),  # no scheme: still user info
    (f"http://h/?a=1&token={SECRET}&b=2", "http://h/?a=1&token=***&b=2"),
    (f"https://h/p?X-Amz-Signature={SECRET};api%5Fkey={SECRET}", "https://h/p?X-Amz-Signature=***;api%5Fkey=***"),
    (f"http://h/#access_token={SECRET}", "http://h/#access_token=***"),
    (f"http://a@b:{SECRET}@c/x", "http://***@c/x"),  # the last @ ends the user info
    ("http://10.0.0.1:8000/v1?model=m", "http://10.0.0.1:8000/v1?model=m"),  # nothing secret: unchanged
    ("http://[::1", "http://[::1"),  # not even a valid URL: still shown, nothing lost
])
def test_a_url_loses_its_user_info_and_credential_like_values(url, shown):
    assert redact_url(url) == shown


def test_every_url_in_a_message_is_redacted_and_a_bare_credential_parameter_too():
    text = f"at 'http://u:{SECRET}@h:9090/?password={SECRET}' and 10.0.0.1:80/?auth={SECRET}&x=1"
    out = redact_text(text)
    assert SECRET not in out and "h:9090" in out and "x=1" in out and "10.0.0.1:80" in out


@pytest.mark.parametrize("raw", ["\x1b[31mred", "\x1b]0;title\x07", "a\x00b", "a\rb", "a\nb", "\u202eevil", "\x85",
                                 "\x9b31m", "tab\there", "\u2028", "\udcff"])
def test_control_characters_are_escaped_visibly(raw):
    shown = visible(raw)
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\u202e" not in shown and "\u2028" not in shown and "\udcff" not in shown
    assert "\\" in shown  # visibly: the escape says what was there


def test_plain_text_is_unchanged_and_flattened_text_is_one_line():
    assert visible("pod-a ü 日本 [x] C:\\path") == "pod-a ü 日本 [x] C:\\path"
    assert flattened("a\n  b\x1b") == "a b\\x1b" and one_line("x" * 10, 4) == "xxxx..."


@pytest.mark.parametrize("url", ["http://a..b", "http://.a", f"http://{'a' * 64}.com", "http://1.2.3.999",
                                 "http://é..b", f"http://{'a.' * 130}com"])
def test_hosts_the_http_client_or_the_resolver_would_refuse_are_input_errors(url):
    with pytest.raises(InputError, match="--x"):
        parse_engine_url(url, "--x")


@pytest.mark.parametrize("url", ["http://a.b.", "http://exämple.com:80", "http://[::1]:8000", "http://a-b_c.svc:1",
                                 f"http://{'a' * 63}.com"])
def test_hosts_it_accepts_are_kept(url):
    assert parse_engine_url(url, "--x").port in (80, 8000, 1)


def test_a_refused_url_never_repeats_its_secret():
    for url in (f"http://u:{SECRET}@h", f"http://h/?token={SECRET}", f"http://{SECRET}@a..b", f"ftp://u:{SECRET}@h",
                f"http://u:{SECRET}@h:99999", f"http://u:{SECRET}@h x"):
        with pytest.raises(InputError) as err:
            parse_engine_url(url, "--x")
        assert SECRET not in str(err.value)


def test_check_host_gives_the_ascii_form():
    assert check_host("exämple.com", "--x") == "xn--exmple-cua.com" and check_host("10.0.0.1", "--x") == "10.0.0.1"


def test_json_keeps_its_value_but_shows_what_a_terminal_would_obey_as_escapes():
    import json

    text = json.dumps({"pod": "a\u202eb\x85c\x7f\u2028"}, ensure_ascii=False)
    shown = json_visible(text)
    assert json.loads(shown) == json.loads(text) and all(ord(c) < 0x7F for c in shown)
