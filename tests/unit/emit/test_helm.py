"""Patching minCachedTokenDelta into Helm values files shaped like the llm-d guide's."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from kvcal.emit import helm_patch
from kvcal.errors import InputError, KvcalError
from kvcal.fit.io import write_fit

import factories

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "values"
ROUTER = FIXTURES / "router-p2p.yaml"
OLD_LAYOUT = FIXTURES / "inference-extension.yaml"
MULTI = FIXTURES / "multi-config.yaml"
NO_P2P = FIXTURES / "no-p2p.yaml"
QUOTED = FIXTURES / "quoted-config.yaml"


def patch(text: str, value: int = 3200, **kw) -> helm_patch.PatchResult:
    return helm_patch.patch_values_text(text, helm_patch.PluginSpec(value), **kw)


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    a, b = old.split("\n"), new.split("\n")
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def embedded(text: str, *path: str) -> dict:
    node = yaml.safe_load(text)
    for key in path:
        node = node[key]
    return yaml.safe_load(node)


def p2p_params(config: dict) -> list[dict]:
    return [p.get("parameters") for p in config["plugins"] if p.get("type") == "p2p-source-producer"]


def comments(text: str) -> list[str]:
    return [ln.split("#", 1)[1] for ln in text.split("\n") if "#" in ln]


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.name)
def test_fixtures_are_valid_yaml(fixture: Path) -> None:
    assert isinstance(yaml.safe_load(fixture.read_text()), dict)


def test_new_layout_changes_exactly_one_line_and_keeps_comments() -> None:
    old = ROUTER.read_text()
    res = patch(old)
    assert changed_lines(old, res.text) == [
        ("              minCachedTokenDelta: 2048  # set by hand from the recipe's output",
         "              minCachedTokenDelta: 3200  # set by hand from the recipe's output")]
    assert comments(res.text) == comments(old)
    key = "p2p-kv-cache-sharing-plugins.yaml"
    config = embedded(res.text, "router", "epp", "pluginsCustomConfig", key)
    assert p2p_params(config) == [{"prefixMatchInfoProducerName": "precise-prefix-cache-producer",
                                   "prefillProfileName": "default", "minCachedTokenDelta": 3200}]
    node = YAML(typ="rt").load(res.text)["router"]["epp"]["pluginsCustomConfig"][key]
    assert type(node).__name__ == "LiteralScalarString"
    assert [c.action for c in res.changes] == ["set"]


def test_round_trip_back_to_the_original_value_is_byte_identical() -> None:
    for fixture, original in ((ROUTER, 2048), (OLD_LAYOUT, None)):
        old = fixture.read_text()
        there = patch(old, 4096 if original is None else 3200).text
        if original is not None:
            assert patch(there, original).text == old


def test_old_layout_flow_mapping_quoted_value_and_strip_chomping() -> None:
    old = OLD_LAYOUT.read_text()
    res = patch(old)
    (before, after), = changed_lines(old, res.text)
    assert before.replace('"4096"', "3200") == after  # quoted string replaced by an int, flow style kept
    raw = yaml.safe_load(res.text)["inferenceExtension"]["pluginsCustomConfig"]["custom-plugins.yaml"]
    assert not raw.endswith("\n")  # |- kept
    assert p2p_params(yaml.safe_load(raw))[0]["minCachedTokenDelta"] == 3200


def test_several_configs_both_layouts_and_one_without_the_plugin() -> None:
    old = MULTI.read_text()
    res = patch(old)
    assert [(c.where.split(" ")[0], c.action) for c in res.changes] == [
        ("router.epp.pluginsCustomConfig[p2p.yaml]", "set"),
        ("router.epp.pluginsCustomConfig[p2p-staging.yaml]", "set"),
        ("router.epp.pluginsCustomConfig[decode-only.yaml]", "no-plugin"),
        ("inferenceExtension.pluginsCustomConfig[legacy.yaml]", "set"),
    ]
    assert len(changed_lines(old, res.text)) == 3
    base = ("router", "epp", "pluginsCustomConfig")
    for key in ("p2p.yaml", "p2p-staging.yaml"):
        assert p2p_params(embedded(res.text, *base, key))[0]["minCachedTokenDelta"] == 3200
    assert embedded(res.text, "inferenceExtension", "pluginsCustomConfig", "legacy.yaml")["plugins"][0]["parameters"]["minCachedTokenDelta"] == 3200
    old_raw = yaml.safe_load(old)["router"]["epp"]["pluginsCustomConfig"]["decode-only.yaml"]
    assert yaml.safe_load(res.text)["router"]["epp"]["pluginsCustomConfig"]["decode-only.yaml"] == old_raw
    assert any("p2p-staging.yaml" in w and "pluginsConfigFile" in w for w in res.warnings)
    assert comments(res.text) == comments(old)


def test_add_plugin_leaves_deliberate_configs_alone_when_plugin_exists() -> None:
    old = MULTI.read_text()
    assert patch(old, add_plugin=True).text == patch(old).text


def test_no_plugin_is_an_error_without_add_plugin() -> None:
    with pytest.raises(InputError, match="--add-plugin"):
        patch(NO_P2P.read_text())


def test_add_plugin_inserts_after_the_prefix_producer() -> None:
    old = NO_P2P.read_text()
    res = helm_patch.patch_values_text(old, helm_patch.PluginSpec(1024, prefill_profile="prefill"), add_plugin=True)
    config = embedded(res.text, "router", "epp", "pluginsCustomConfig", "plugins.yaml")
    assert [p["type"] for p in config["plugins"]] == [
        "precise-prefix-cache-producer", "p2p-source-producer", "prefix-cache-scorer", "max-score-picker"]
    assert config["plugins"][1]["parameters"] == {"prefixMatchInfoProducerName": "precise-prefix-cache-producer",
                                                  "prefillProfileName": "prefill", "minCachedTokenDelta": 1024}
    assert comments(res.text) == comments(old)
    # only inserted lines (the plugin entry, and the EPP's alpha flag): removing them gives back the input
    ops = difflib.SequenceMatcher(None, old.split("\n"), res.text.split("\n"), autojunk=False).get_opcodes()
    assert {op for op, *_ in ops} == {"equal", "insert"}
    assert yaml.safe_load(res.text)["router"]["epp"]["flags"] == {"allow-experimental-plugins": True}
    assert [c.action for c in res.changes] == ["added-plugin"]


def test_quoted_embedded_config_becomes_a_block_literal() -> None:
    res = patch(QUOTED.read_text())
    key = YAML(typ="rt").load(res.text)["router"]["epp"]["pluginsCustomConfig"]["plugins.yaml"]
    assert type(key).__name__ == "LiteralScalarString"
    assert p2p_params(yaml.safe_load(str(key)))[0] == {"minCachedTokenDelta": 3200}
    assert any("not a block literal" in n for n in res.notes)
    assert res.text.startswith("# An embedded config written as a quoted string")


def test_unchanged_value_gives_identical_text() -> None:
    old = ROUTER.read_text()
    res = patch(old, 2048)
    assert res.text == old and [c.action for c in res.changes] == ["unchanged"]


INLINE = """\
router:
  epp:
    pluginsCustomConfig:
      a.yaml: |
        plugins:
          - type: p2p-source-producer
            parameters:
              prefixMatchInfoProducerName: x   # keep me
          - type: max-score-picker
      b.yaml: |
        plugins:
        - type: p2p-source-producer
"""


def test_missing_key_and_missing_parameters_are_added() -> None:
    res = patch(INLINE, 640)
    a = embedded(res.text, "router", "epp", "pluginsCustomConfig", "a.yaml")
    b = embedded(res.text, "router", "epp", "pluginsCustomConfig", "b.yaml")
    assert p2p_params(a) == [{"prefixMatchInfoProducerName": "x", "minCachedTokenDelta": 640}]
    assert p2p_params(b) == [{"minCachedTokenDelta": 640}]
    assert "# keep me" in res.text


def test_crlf_line_endings_survive() -> None:
    old = ROUTER.read_text().replace("\n", "\r\n")
    res = patch(old)
    assert "\r\n" in res.text and "\n" not in res.text.replace("\r\n", "")
    assert len(changed_lines(old.replace("\r\n", "\n"), res.text.replace("\r\n", "\n"))) == 1


EMBED = ("router:\n  epp:\n    pluginsCustomConfig:\n      c.yaml: |\n        plugins:\n"
         "          - type: p2p-source-producer\n            parameters:{params}\n")


@pytest.mark.parametrize("text, match", [
    ("router: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "not a Helm values mapping"),
    ("router:\n  epp:\n    replicas: 1\n", "no embedded EPP config"),
    ("router:\n  epp:\n    pluginsCustomConfig:\n      x.yaml: |\n        plugins: [a, {b\n", "embedded config"),
    # parameters that are not a mapping were replaced wholesale, the user's entries and comments lost
    (EMBED.format(params="\n              - prefillProfileName: prefill   # keep\n              - minCachedTokenDelta: 2048"),
     "parameters are a list, not a mapping"),
    (EMBED.format(params=' "oops"'), "parameters are the value 'oops'"),
    (EMBED.format(params=" 7"), "parameters are the value '7'"),
    (EMBED.format(params=" [a, b]"), "parameters are a list"),
    # once internal errors (exit 70) from the check that the patch changed nothing else
    (EMBED.format(params="\n              minCachedTokenDelta: 2048\n              minCachedTokenDelta: 4096"),
     "'minCachedTokenDelta' appears twice in one mapping"),
    (EMBED.format(params="\n              minCachedTokenDelta: &t 2048\n          - type: other\n"
                         "            parameters: {x: *t}"), "probably a YAML anchor or alias"),
])
def test_bad_values_files_are_one_line_input_errors(text: str, match: str) -> None:
    with pytest.raises(InputError, match=re.escape(match)) as err:
        patch(text)
    assert "\n" not in str(err.value)


def test_verification_refuses_unintended_changes(monkeypatch) -> None:
    """The safety net can fire: a write-back that touches another key must be refused."""
    real = helm_patch.write_back
    monkeypatch.setattr(helm_patch, "write_back", lambda *a: real(*a).replace("enabled: false", "enabled: true"))
    with pytest.raises(KvcalError, match="refusing"):
        patch(ROUTER.read_text())


@settings(max_examples=15, deadline=None)
@given(value=st.integers(1, 10**7))
def test_any_value_changes_only_the_plugin_lines(value: int) -> None:
    old = MULTI.read_text()
    res = patch(old, value)
    diffs = changed_lines(old, res.text)
    assert all(re.fullmatch(rf"\s*minCachedTokenDelta: {value}", new) for _, new in diffs)
    data = yaml.safe_load(res.text)
    assert p2p_params(yaml.safe_load(data["router"]["epp"]["pluginsCustomConfig"]["p2p.yaml"]))[0]["minCachedTokenDelta"] == value


# ------------------------------------------------------------------ files and CLI

def test_in_place_keeps_backups(tmp_path) -> None:
    target = tmp_path / "v.yaml"
    target.write_text(ROUTER.read_text())
    first = helm_patch.patch_values_file(target, helm_patch.PluginSpec(3200), in_place=True)
    assert first.stdout == "" and first.backup == tmp_path / "v.yaml.bak"
    assert first.backup.read_text() == ROUTER.read_text()
    assert "minCachedTokenDelta: 3200" in target.read_text()
    second = helm_patch.patch_values_file(target, helm_patch.PluginSpec(4096), in_place=True)
    assert second.backup == tmp_path / "v.yaml.bak.1" and "3200" in second.backup.read_text()


def test_in_place_read_only_file_is_refused_and_untouched(tmp_path) -> None:
    target = tmp_path / "v.yaml"
    target.write_text(ROUTER.read_text())
    target.chmod(0o444)
    try:
        with pytest.raises(InputError, match="read-only"):
            helm_patch.patch_values_file(target, helm_patch.PluginSpec(3200), in_place=True)
        assert target.read_text() == ROUTER.read_text()
        assert not (tmp_path / "v.yaml.bak").exists()
    finally:
        target.chmod(0o644)


def test_diff_is_a_unified_diff() -> None:
    out = helm_patch.patch_values_file(ROUTER, helm_patch.PluginSpec(3200), diff=True).stdout
    assert out.startswith("--- a/router-p2p.yaml\n+++ b/router-p2p.yaml\n@@ ")
    assert [ln for ln in out.split("\n") if ln.startswith(("+", "-")) and not ln.startswith(("---", "+++"))] == [
        "-              minCachedTokenDelta: 2048  # set by hand from the recipe's output",
        "+              minCachedTokenDelta: 3200  # set by hand from the recipe's output"]


def _fit_file(tmp_path):
    fit = factories.make_fit()  # the default curves cross at 682 tokens; block 64
    return write_fit(fit, tmp_path / "fit.json")  # the default rule: 682 -> 704, the cheaper neighbouring block


def test_cli_helm_pipe_prints_the_whole_file(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    rc = main(["emit-config", str(_fit_file(tmp_path)), "--format", "helm", "--values", str(ROUTER)])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out == ROUTER.read_text().replace("minCachedTokenDelta: 2048", "minCachedTokenDelta: 704")
    assert "2048 -> 704" in err


def test_cli_in_place_and_diff(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    target = tmp_path / "v.yaml"
    target.write_text(MULTI.read_text())
    rc = main(["emit-config", str(_fit_file(tmp_path)), "--format", "helm", "--values", str(target), "--in-place", "--diff"])
    out, err = capsys.readouterr()
    plus = [ln for ln in out.split("\n") if ln.startswith("+") and not ln.startswith("+++")]
    assert rc == 0 and len(plus) == 3 and all(ln.endswith("minCachedTokenDelta: 704") for ln in plus)
    assert target.read_text().count("minCachedTokenDelta: 704") == 3
    assert (tmp_path / "v.yaml.bak").read_text() == MULTI.read_text() and "backup" in err


@pytest.mark.parametrize("content, extra, match", [
    ("router: [unclosed\n", [], "not valid YAML"),
    (NO_P2P.read_text(), [], "--add-plugin"),
    (ROUTER.read_text(), ["--margin", "-0.5"], "--margin"),
    (ROUTER.read_text(), ["--block-size", "0"], "--block-size"),
])
def test_cli_bad_input_leaves_the_file_untouched(tmp_path, capsys, content, extra, match) -> None:
    from kvcal.cli.app import main

    target = tmp_path / "v.yaml"
    target.write_text(content)
    rc = main(["emit-config", str(_fit_file(tmp_path)), "--format", "helm", "--values", str(target), "--in-place", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and match in err and "Traceback" not in err
    assert target.read_text() == content
    assert sorted(os.listdir(tmp_path)) == ["fit.json", "v.yaml"]


def test_cli_read_only_values(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    target = tmp_path / "v.yaml"
    target.write_text(ROUTER.read_text())
    target.chmod(0o444)
    try:
        rc = main(["emit-config", str(_fit_file(tmp_path)), "--format", "helm", "--values", str(target), "--in-place"])
    finally:
        target.chmod(0o644)
    out, err = capsys.readouterr()
    assert rc == 2 and "read-only" in err and target.read_text() == ROUTER.read_text()


IRREGULAR = """\
# hand-edited: odd spacing and mixed indentation must survive
global:
    replicas:    2          # four-space indent here
    tags: [ a,   b ]
router:
  epp:
    flags: { allow-experimental-plugins:  true }
    pluginsCustomConfig:
      p.yaml: |
        plugins:
        - type: p2p-source-producer
          parameters: { minCachedTokenDelta:   2048 }
        - type: max-score-picker
    note: 'single quoted'   # two-space indent here
"""


def test_irregular_formatting_outside_the_value_is_untouched() -> None:
    res = patch(IRREGULAR, 640)
    assert changed_lines(IRREGULAR, res.text) == [
        ("          parameters: { minCachedTokenDelta:   2048 }", "          parameters: { minCachedTokenDelta:   640 }")]


# ------------------------------------------------------------------ the EPP's alpha flag

ALPHA_EPP = """router:
  epp:
    # the EPP's own flags
{flags}    pluginsCustomConfig:  # the config
      p.yaml: |
        plugins:
        - type: p2p-source-producer
          parameters:
            minCachedTokenDelta: 2048
"""


@pytest.mark.parametrize("flags, want", [
    ("", {"allow-experimental-plugins": True}),
    ("    flags:\n      v: 2   # verbosity\n", {"v": 2, "allow-experimental-plugins": True}),
    ("    flags:\n      allow-experimental-plugins: false  # off\n", {"allow-experimental-plugins": True}),
    ("    flags: {}\n", {"allow-experimental-plugins": True}),
    ("    flags: {v: 2}\n", {"allow-experimental-plugins": True, "v": 2}),
    ("    flags:\n", {"allow-experimental-plugins": True}),
    ("    flags: null\n", {"allow-experimental-plugins": True}),
])
def test_the_epp_is_given_the_alpha_flag_in_the_charts_form(flags: str, want: dict) -> None:
    """p2p-source-producer is alpha: the chart's flags map must carry allow-experimental-plugins: true."""
    old = ALPHA_EPP.format(flags=flags)
    res = patch(old, 640)
    assert yaml.safe_load(res.text)["router"]["epp"]["flags"] == want
    assert comments(res.text) == comments(old)
    assert any("allow-experimental-plugins" in n for n in res.notes)
    again = patch(res.text, 640)  # already set: nothing more changes
    assert again.text == res.text


def test_the_alpha_flag_is_not_set_for_an_epp_that_does_not_read_the_plugin_nor_over_a_list() -> None:
    inactive = ("router:\n  epp:\n    pluginsConfigFile: other.yaml\n    pluginsCustomConfig:\n      other.yaml: |\n"
                "        plugins:\n        - type: max-score-picker\n      p.yaml: |\n        plugins:\n"
                "        - type: p2p-source-producer\n          parameters:\n            minCachedTokenDelta: 2048\n")
    assert "flags" not in yaml.safe_load(patch(inactive, 640).text)["router"]["epp"]
    listed = ALPHA_EPP.format(flags="    flags:\n      - --v=2\n")
    res = patch(listed, 640)
    assert yaml.safe_load(res.text)["router"]["epp"]["flags"] == ["--v=2"]
    assert any("allow-experimental-plugins: true there by hand" in w for w in res.warnings)
