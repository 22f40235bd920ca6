"""`amprewrite --explain AMP212` (as `ruff rule`): a finding code's title, why it fires, what
to do and an example, from the catalog (the declaration's text, or its rule's examples), and
where its documentation is (`Docs: URL`, where there is a docs URL)."""

from __future__ import annotations

import difflib
import textwrap

import click

from amprewrite.catalog import Code, docs_url
from amprewrite.code_index import codes
from amprewrite.rules.registry import all_rules


def explanation(code: Code, docs_url_template: str | None = None) -> str:
    """The text `--explain` prints for `code`, ending with its docs URL where the template
    (`docs-url`, or the project's findings page) gives one."""
    wrap = textwrap.TextWrapper(width=88)
    url = docs_url(code.id, docs_url_template)
    return "\n".join([
        f"{code.id} ({code.severity.value}): {code.title}",
        "",
        *wrap.wrap(f"Why it fires: {code.why}"),
        "",
        *wrap.wrap(f"What to do: {code.advice}"),
        "",
        "Example:",
        "",
        textwrap.indent(example(code), "    ", lambda _: True),
        *(["", f"Docs: {url}"] if url is not None else []),
    ])


def example(code: Code) -> str:
    """The code's own example, else the shortest example of the rules that declare it, as a
    diff (or the source it leaves as it is)."""
    if code.example is not None:
        return code.example
    shown = min((e for rule in all_rules().values() if code in rule.codes
                 for e in rule.examples if code in e.codes),
                key=lambda e: len(e.before), default=None)
    if shown is None:
        raise LookupError(f"{code.id} has no example: give its declaration one")
    if shown.after is None:
        return shown.before.rstrip("\n") + "\n# left as it is"
    return "\n".join(example_diff(shown.before, shown.after))


def explain_option(
    ctx: click.Context, _: click.Parameter, value: str, docs_url_template: str | None,
) -> None:
    """The eager `--explain CODE` option: print the explanation (with the code's docs URL from
    `docs_url_template`) and exit, or exit 2 naming the codes it resembles (`cli._explain`
    calls it only for a value, outside click's resilient parsing)."""
    known = codes()
    code = known.get(value.strip().upper())
    if code is None:
        close = difflib.get_close_matches(value.strip().upper(), known, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else (
            " (docs/findings.md lists every code)")
        raise click.BadParameter(f"no finding code {value!r}{hint}", ctx, param_hint="--explain")
    click.echo(explanation(code, docs_url_template))
    ctx.exit(0)


def example_diff(before: str, after: str) -> list[str]:
    """A rule example's rewrite as the lines of a unified diff, without its header."""
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=2)
    return list(diff)[2:]
