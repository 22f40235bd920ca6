"""The CST edits rules share: arguments and container items added or removed keeping the
source's style, statements removed or unwrapped, expressions made ready for `.attr`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts

Builder = Callable[[cst.CSTNode], cst.CSTNode]

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


def as_receiver(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` ready to take `.attr`: `loss` stays, `a + b` becomes `(a + b)`."""
    if isinstance(node, _ATOMIC) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def as_float(node: cst.CSTNode) -> cst.CSTNode:
    """`x` -> `x.float()`, `a + b` -> `(a + b).float()`."""
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(func=cst.Attribute(value=as_receiver(node), attr=cst.Name("float")))


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, spaced as PEP 8 spaces keyword arguments."""
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def append_arguments(new: Sequence[cst.Arg], comma_before: cst.Comma | None = None) -> Builder:
    """A builder appending `new` to a call's arguments: `f(a)` -> `f(a, b=1)`; a call with a
    trailing comma (often one argument per line) gets each new argument on its own line, the
    trailing comma kept last. `comma_before`: the comma after the last argument, when not
    `, ` (one that breaks the line) and the call has no trailing comma."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = list(node.args)
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if not args:
            return node.with_changes(args=[*(a.with_changes(comma=space) for a in new[:-1]),
                                           new[-1]])
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT:  # what followed the last one ends the call
            before = space if comma_before is None else _line_break(comma_before)
            args[-1] = last.with_changes(comma=before,
                                         whitespace_after_arg=cst.SimpleWhitespace(""))
            added = [*(a.with_changes(comma=space) for a in new[:-1]),
                     new[-1].with_changes(whitespace_after_arg=last.whitespace_after_arg)]
        else:
            assert isinstance(last.comma, cst.Comma)
            separator = args[-2].comma if len(args) > 1 else last.comma.with_changes(
                whitespace_after=node.whitespace_before_args)  # `(\n    a,\n)`: `(`'s break
            assert isinstance(separator, cst.Comma)
            args[-1] = last.with_changes(comma=_line_break(separator, last.comma))
            added = [*(a.with_changes(comma=_line_break(separator)) for a in new[:-1]),
                     new[-1].with_changes(comma=_line_break(last.comma, lines=True))]
        return node.with_changes(args=[*args, *added])

    return build


def _line_break(
    comma: cst.Comma, comment_of: cst.Comma | None = None, lines: bool = False
) -> cst.Comma:
    """`comma` (a line break the new arguments are laid out by) with the comment after
    `comment_of` (None: no comment), and the comment lines under it only with `lines`: the
    author's comments stay with the arguments they were written at."""
    after = comma.whitespace_after
    if not isinstance(after, cst.ParenthesizedWhitespace):
        return comma
    own = comment_of.whitespace_after if comment_of is not None else None
    first = own.first_line if isinstance(own, cst.ParenthesizedWhitespace) else (
        cst.TrailingWhitespace())
    return comma.with_changes(whitespace_after=after.with_changes(
        first_line=first, empty_lines=after.empty_lines if lines else ()))


def append_in_layout(
    call: cst.Call, new: Sequence[cst.Arg], facts: ModuleFacts, limit: int
) -> Builder:
    """A builder appending `new` to a call's arguments as the author lays them out: after the
    line break their arguments already continue on (each new one on its own line), else on
    the call's line, or one per line when that line would grow past the file's limit."""
    broken = next((a.comma for a in call.args if isinstance(a.comma, cst.Comma) and isinstance(
        a.comma.whitespace_after, cst.ParenthesizedWhitespace)), None)
    if broken is not None and call.args[-1].comma is cst.MaybeSentinel.DEFAULT:
        builders = [append_arguments([argument], broken) for argument in new]
        return lambda node: functools.reduce(lambda built, build: build(built), builders, node)
    if too_long(facts, call, new, limit):
        return one_per_line(append_arguments(new), facts.module.default_indent)
    return append_arguments(new)


def append_entries(new: Sequence[cst.DictElement]) -> Builder:
    """A builder appending `new` to a dict's entries, in the style of its last one (see
    `insert_after`): `{"a": 1}` -> `{"a": 1, "b": 2}`."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Dict)
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if not node.elements:
            return node.with_changes(elements=[*(e.with_changes(comma=space) for e in new[:-1]),
                                               new[-1]])
        for element in new:
            node = insert_after(node, node.elements[-1], element)(node)
        return node

    return build


def replaced_by(new: cst.CSTNode) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A builder putting `new` in the node's place."""
    return lambda _: new


def remove(_: cst.CSTNode) -> cst.RemovalSentinel:
    """A builder taking the node out of its parent (a statement, a decorator)."""
    return cst.RemoveFromParent()


def unwrap(node: cst.CSTNode) -> cst.FlattenSentinel:
    """`with x:` / `if c:` -> its body, in place, with the comments above it kept."""
    assert isinstance(node, cst.With | cst.If)
    return in_place_of(node, list(node.body.body))


def in_place_of(node: cst.BaseStatement, body: list[cst.BaseStatement]) -> cst.FlattenSentinel:
    """`body` standing where `node` stood, the comments and blank lines above it kept."""
    body[0] = body[0].with_changes(leading_lines=[*node.leading_lines, *body[0].leading_lines])
    return cst.FlattenSentinel(body)


Container = cst.Dict | cst.Call


def _attribute(container: cst.CSTNode) -> str:
    return "elements" if isinstance(container, cst.Dict) else "args"


def insert_after(container: Container, anchor: cst.CSTNode, new: cst.CSTNode) -> Builder:
    """A builder inserting `new` after `anchor`, with the separator and trailing-comma style
    of the items around it."""
    attribute = _attribute(container)
    position = list(getattr(container, attribute)).index(anchor)

    def build(node: cst.CSTNode) -> cst.CSTNode:
        items = list(getattr(node, attribute))
        current = items[position]
        if position + 1 < len(items):
            added = new.with_changes(comma=current.comma)
        else:
            separator = items[position - 1].comma if position > 0 else cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))
            added = new.with_changes(comma=current.comma)
            items[position] = current.with_changes(comma=separator)
        return node.with_changes(**{attribute: [*items[: position + 1], added,
                                                *items[position + 1 :]]})

    return build


def without(container: Container, item: cst.CSTNode) -> Builder:
    """A builder removing `item` (found by structure, so other edits of the same container may
    come first); when it was last, the new last item takes its comma."""
    attribute = _attribute(container)

    def build(node: cst.CSTNode) -> cst.CSTNode:
        items = list(getattr(node, attribute))
        position = next(i for i, candidate in enumerate(items)
                        if candidate.deep_equals(item.with_changes(comma=candidate.comma)))
        removed = items.pop(position)
        if position == len(items) and position > 0:  # `f(a, b\n)` -> `f(a\n)`
            items[-1] = items[-1].with_changes(comma=removed.comma)
            if isinstance(removed, cst.Arg):
                items[-1] = items[-1].with_changes(
                    whitespace_after_arg=removed.whitespace_after_arg)
        return node.with_changes(**{attribute: items})

    return build


def too_long(
    facts: ModuleFacts, container: Container, added: Sequence[cst.CSTNode], limit: int
) -> bool:
    """Whether adding `added` to a container on a one-line statement makes that line longer
    than `limit` (the project's line length: `RuleContext.line_limit`)."""
    module = facts.module
    statement = facts.owner.get(id(container))
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    line = module.code_for_node(statement.with_changes(leading_lines=())).rstrip("\r\n")
    if "\n" in line:
        # a statement over several lines: its layout is the author's, but for a container on
        # its first line (`torch.save({...},` then the path on the next)
        if first_line_column(facts, container) is None:
            return False
        line = line.split("\n", 1)[0]
    length = facts.indentation(statement) + len(line)
    length += sum(len(", " + module.code_for_node(node)) for node in added)
    return length > limit


def first_line_column(facts: ModuleFacts, container: Container) -> int | None:
    """The column of a one-line container on the first line of a statement written over
    several lines (`torch.save({"model": model}, ` with the path on the next), else None."""
    statement = facts.owner.get(id(container))
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    module = facts.module
    code = module.code_for_node(statement.with_changes(leading_lines=())).rstrip("\r\n")
    first, inner = code.split("\n", 1)[0], module.code_for_node(container)
    if "\n" not in code or "\n" in inner or first.count(inner) != 1:
        return None
    return facts.indentation(statement) + first.index(inner)


def continued_at(build: Builder, column: int) -> Builder:
    """`build`, then its container's last item on a line of its own, aligned one column
    past the container's opening bracket at `column` (`{"a": 1,` / ` "b": 2}`)."""

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        built = build(node)
        assert isinstance(built, Container)
        attribute = _attribute(built)
        items = list(getattr(built, attribute))
        if len(items) < 2 or not isinstance(items[-2].comma, cst.Comma):
            return built
        newline = cst.ParenthesizedWhitespace(indent=False,
                                              last_line=cst.SimpleWhitespace(" " * (column + 1)))
        items[-2] = items[-2].with_changes(comma=items[-2].comma.with_changes(
            whitespace_after=newline))
        return built.with_changes(**{attribute: items})

    return wrap


def one_per_line(build: Builder, indent: str) -> Builder:
    """`build`, then its container's items one per line, `indent` deeper than the statement,
    each with a trailing comma, the closing bracket on a line of its own (the common style
    for a dict or call too long for one line)."""

    def newline(extra: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(extra))

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        built = build(node)
        assert isinstance(built, Container)
        attribute = _attribute(built)
        items = list(getattr(built, attribute))
        items = [item.with_changes(comma=cst.Comma(whitespace_after=newline(
            indent if index + 1 < len(items) else ""))) for index, item in enumerate(items)]
        if isinstance(built, cst.Dict):
            return built.with_changes(elements=items, lbrace=cst.LeftCurlyBrace(
                whitespace_after=newline(indent)), rbrace=cst.RightCurlyBrace())
        return built.with_changes(args=items, whitespace_before_args=newline(indent))

    return wrap


def append_parameter(
    name: str, default: cst.BaseExpression, comma_before: cst.Comma | None = None
) -> Builder:
    """A builder adding `name=default` to a function's parameters: last of the positional
    ones, or keyword-only after `*args` / `*`, always before `**kwargs`; a trailing comma
    (one parameter per line) is kept last. `comma_before`: the comma before it, when not `, `."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Parameters)
        keyword_only = not isinstance(node.star_arg, cst.MaybeSentinel)
        field_name = "kwonly_params" if keyword_only else "params"
        existing = list(getattr(node, field_name))
        new = cst.Param(cst.Name(name), default=default,
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace("")))
        ordered = _ordered_parameters(node)
        last = ordered[-1] if ordered else None
        space = comma_before or cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        trailing = last is not None and isinstance(last.comma, cst.Comma)
        if trailing:  # `a,\n    b,\n)`: the new one on a line of its own, the comma kept
            assert last is not None
            separator = ordered[-2].comma if len(ordered) > 1 else last.comma
            new = new.with_changes(comma=last.comma)
            node = _with_comma(node, last, separator)
            existing = list(getattr(node, field_name))
        elif last is not None:
            if last is not node.star_kwarg:  # what followed the last one ends the list
                new = new.with_changes(whitespace_after_param=last.whitespace_after_param)
            node = _with_comma(node, last, space, cst.SimpleWhitespace(""))
            existing = list(getattr(node, field_name))
        if (not keyword_only and node.star_kwarg is not None and not trailing
                and isinstance(new.comma, cst.MaybeSentinel)):
            new = new.with_changes(comma=space)  # `**kwargs` still follows
        return node.with_changes(**{field_name: [*existing, new]})

    return build


def without_parameter(name: str) -> Builder:
    """A builder removing the parameter `name` (what `append_parameter` added); when it was
    last, the new last parameter takes its comma."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Parameters)
        ordered = _ordered_parameters(node)
        for field_name in ("params", "kwonly_params"):
            items = list(getattr(node, field_name))
            position = next((i for i, p in enumerate(items) if p.name.value == name), None)
            if position is None:
                continue
            removed = items.pop(position)
            node = node.with_changes(**{field_name: items})
            if ordered[-1] is removed and len(ordered) > 1:
                node = _with_comma(node, _ordered_parameters(node)[-1], removed.comma,
                                   removed.whitespace_after_param)
            return node
        return node

    return build


def _ordered_parameters(node: cst.Parameters) -> list[cst.Param]:
    """The parameters in source order (those that carry commas)."""
    star = [node.star_arg] if isinstance(node.star_arg, cst.Param) else []
    kwargs = [node.star_kwarg] if node.star_kwarg is not None else []
    return [*node.posonly_params, *node.params, *star, *node.kwonly_params, *kwargs]


def _with_comma(
    node: cst.Parameters, param: cst.Param, comma: cst.Comma | cst.MaybeSentinel,
    whitespace: cst.BaseParenthesizableWhitespace | None = None,
) -> cst.Parameters:
    """`node` with `param` (one of its parameters) followed by `comma` (and, when given,
    `whitespace` between them)."""
    if param is node.star_kwarg:
        return node  # `**kwargs` stays last: the new parameter goes before it
    changes: dict = {"comma": comma}
    if whitespace is not None:
        changes["whitespace_after_param"] = whitespace
    for field_name in ("posonly_params", "params", "kwonly_params"):
        items = list(getattr(node, field_name))
        if param in items:
            items[items.index(param)] = param.with_changes(**changes)
            return node.with_changes(**{field_name: items})
    return node.with_changes(star_arg=param.with_changes(**changes))


def importing_only(names: frozenset[str]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`from amprewrite_runtime import GradScaler, autocast` -> `... import autocast`."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        body = []
        for small in node.body:
            assert isinstance(small, cst.ImportFrom) and isinstance(small.names, Sequence)
            aliases = [a for a in small.names
                       if (a.evaluated_alias or a.evaluated_name) in names]
            if aliases:
                aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                body.append(small.with_changes(names=aliases))
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(body=body)

    return build
