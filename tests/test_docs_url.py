"""A docs URL per finding code, as ruff gives one per rule (issue 39): `docs-url` in
[tool.amprewrite] is its template (`...#{code}`), else the code's anchor in docs/findings.md on
the project's repository; `--explain` ends with it, SARIF rules carry it as `helpUri` (and a
text and a Markdown help), JSON findings as `url`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from amprewrite import catalog
from amprewrite.cli import main
from amprewrite.code_index import codes
from amprewrite.output_formats import sarif_rule
from tests.test_cli import TRAINING

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "https://example.org/amprewrite/findings.html?v={1}#{code}"  # its other braces stay
REPOSITORY = "https://github.com/example/amprewrite"


def _pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project (its own .git, where the configuration lookup stops) with a training script,
    and the current directory."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_bytes(TRAINING)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _configure(project: Path, table: str) -> None:
    (project / "pyproject.toml").write_text(f"[tool.amprewrite]\n{table}\n")


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


# --- the default: the code's anchor in docs/findings.md on the project's repository ----------


def test_the_repository_is_the_one_pyproject_names() -> None:
    """catalog.REPOSITORY mirrors [project.urls] (an installed amprewrite has no pyproject.toml
    to read): none today, so no URL is shown unless `docs-url` gives a template."""
    urls = _pyproject()["project"].get("urls", {})
    named = next((urls[key] for key in ("Repository", "Source", "Source Code", "Code")
                  if key in urls), None)
    assert named == catalog.REPOSITORY
    assert (catalog.default_docs_url() is None) == (named is None)


def test_the_default_points_at_each_codes_anchor_in_the_findings_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(catalog, "REPOSITORY", REPOSITORY + "/")
    page = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', page))
    for code in codes():
        url = catalog.docs_url(code, catalog.default_docs_url())
        assert url is not None
        parts = urlsplit(url)
        assert url.startswith(f"{REPOSITORY}/blob/main/") and "//blob" not in url
        assert (ROOT / parts.path.split("/blob/main/", 1)[1]).is_file()
        assert parts.fragment == code and code in anchors


def test_without_a_repository_or_a_template_nothing_shows_a_url(project: Path) -> None:
    status, out, _ = _invoke("--explain", "AMP212")
    assert status == 0 and "Docs:" not in out
    status, out, _ = _invoke("--check", "--output-format", "json", "train.py")
    findings = json.loads(out)["files"][0]["findings"]
    assert status == 1 and findings and all(f["url"] is None for f in findings)
    status, out, _ = _invoke("--check", "--output-format", "sarif", "train.py")
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    assert status == 1 and rules and not any("helpUri" in rule for rule in rules)


def test_explain_ends_with_the_default_url(
    project: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(catalog, "REPOSITORY", REPOSITORY)
    status, out, _ = _invoke("--explain", "amp212")
    assert status == 0
    assert out.endswith(f"\n\nDocs: {REPOSITORY}/blob/main/docs/findings.md#AMP212\n")


# --- a configured template -------------------------------------------------------------------


def test_explain_uses_the_template_of_the_configuration_found_from_here(
    project: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _configure(project, f'docs-url = "{TEMPLATE}"')
    (project / "src").mkdir()
    monkeypatch.chdir(project / "src")  # found by walking up, as for a run
    status, out, _ = _invoke("--explain", "AMP212")
    assert status == 0
    assert out.splitlines()[-1] == "Docs: https://example.org/amprewrite/findings.html?v={1}#AMP212"
    assert out.startswith("AMP212 (skip): ")  # the rest as it was


def test_json_findings_carry_their_codes_url(project: Path) -> None:
    _configure(project, f'docs-url = "{TEMPLATE}"')
    status, out, _ = _invoke("--check", "--output-format", "json", "train.py")
    findings = json.loads(out)["files"][0]["findings"]
    assert status == 1 and findings
    for finding in findings:
        assert finding["url"] == TEMPLATE.replace("{code}", finding["code"])
        assert list(finding)[-1] == "url"


def test_sarif_rules_carry_their_codes_help_uri(project: Path) -> None:
    _configure(project, f'docs-url = "{TEMPLATE}"')
    status, out, _ = _invoke("--check", "--output-format", "sarif", "train.py")
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    assert status == 1 and rules
    for rule in rules:
        url = TEMPLATE.replace("{code}", rule["id"])
        assert rule["helpUri"] == url
        assert rule["help"]["text"].endswith(f"Docs: {url}")
        assert rule["help"]["markdown"].endswith(f"]({url})")


@pytest.mark.parametrize("template", [
    "https://example.org/amp", "https://example.org/{CODE}", "https://example.org/{code_lower}",
])
def test_a_template_without_the_code_is_refused(project: Path, template: str) -> None:
    _configure(project, f'docs-url = "{template}"')
    for args in (["train.py"], ["--output-format", "sarif", "train.py"],
                 ["--explain", "AMP212"]):
        status, out, err = _invoke(*args)
        assert status == 2 and out == "", args
        assert (f"docs-url in [tool.amprewrite] of {project / 'pyproject.toml'}: expected a "
                f"URL template containing {{code}}") in err
        assert 'write e.g. docs-url = "https://example.org/amprewrite/findings#{code}"' in err


def test_a_template_that_is_not_a_string_is_refused(project: Path) -> None:
    _configure(project, "docs-url = true")
    status, _, err = _invoke("train.py")
    assert status == 2 and "docs-url in [tool.amprewrite]" in err
    assert "expected a string, got true (a boolean)" in err


def test_a_misspelt_key_gets_a_did_you_mean(project: Path) -> None:
    _configure(project, f'docs_url = "{TEMPLATE}"')
    status, _, err = _invoke("train.py")
    assert status == 2 and "did you mean 'docs-url'?" in err


# --- every code of the catalog ---------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(codes()))
class TestEverySarifRule:
    def test_has_its_help_uri_and_help_in_text_and_markdown(self, code: str) -> None:
        declared = codes()[code]
        url = TEMPLATE.replace("{code}", code)
        rule = sarif_rule(code, TEMPLATE)
        assert rule["helpUri"] == url
        text, markdown = rule["help"]["text"], rule["help"]["markdown"]
        for shown in (text, markdown):
            assert declared.title in shown and declared.why in shown
            assert declared.advice in shown and url in shown
        assert text.startswith(f"{code} ({declared.severity.value}): {declared.title}\n\n")
        assert markdown.startswith(f"**{code}** ")
        assert f"]({url})" in markdown and "](" not in text

    def test_has_its_help_and_no_help_uri_without_a_url(self, code: str) -> None:
        rule = sarif_rule(code, None)
        assert "helpUri" not in rule
        assert codes()[code].advice in rule["help"]["text"]
        assert codes()[code].why in rule["help"]["markdown"]
        assert "Docs:" not in rule["help"]["text"] and "](" not in rule["help"]["markdown"]
