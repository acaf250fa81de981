"""emit-config's settings are one model whose fields declare their bounds, checked before the fit is read."""

from __future__ import annotations

import pytest

from kvcal.emit.options import EmitOptions
from kvcal.errors import InputError


def _no_work(*_args, **_kwargs):
    raise AssertionError("the fit was read")


@pytest.mark.parametrize("flags, says", [
    (["--p2p-port", "70000"], "--p2p-port must lie within 1-65535, got 70000"),
    (["--chunk-size", "0"], "--chunk-size must be a positive number of tokens, e.g. 8192, got 0"),
    (["--rule", "upper", "--margin", "-1"], "--margin must be a fraction"),
    (["--block-size", "0"], "--block-size"),
])
def test_a_bad_emit_setting_is_refused_before_the_fit_is_read(flags, says, kvcal, monkeypatch, tmp_path):
    monkeypatch.setattr("kvcal.emit.formats.emit", _no_work)
    done = kvcal("emit-config", tmp_path / "fit.json", *flags)
    assert done.code == 2, done.err
    assert says in done.err and len(done.err.strip().splitlines()) == 1


def test_a_port_must_be_an_integer_not_a_flag():
    with pytest.raises(InputError, match="--p2p-port"):
        EmitOptions(p2p_port=True)
    assert EmitOptions(format="json").p2p_port == 7777
