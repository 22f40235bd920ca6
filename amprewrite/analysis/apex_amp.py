"""apex.amp usage (removed from apex in 2025): what the migration to native AMP must undo."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

APEX_IMPORT_UNUSED = declare(
    "AMP145", SKIP, "apex.amp imported but never called",
    "apex (SyncBatchNorm, fused optimizers) does not make a script mixed precision: it is "
    "rewritten, not migrated; remove the unused `amp` import.",
    why="apex.amp is imported but none of its functions is called.",
    example="from apex import amp   # never called",
)


@dataclass
class ApexAmp:
    """The apex.amp calls of a module, to migrate to native AMP."""

    imports: list[Statement] = field(default_factory=list)  # `from apex import amp`
    initialize: list[tuple[Statement, cst.Call]] = field(default_factory=list)
    scale_loss: list[cst.With] = field(default_factory=list)  # `with amp.scale_loss(...) as s:`
    master_params: list[cst.Call] = field(default_factory=list)
    state_entries: list[tuple[cst.Dict, cst.DictElement]] = field(default_factory=list)
    state_statements: list[Statement] = field(default_factory=list)  # amp.load_state_dict(...)
    unsupported: list[cst.Call] = field(default_factory=list)  # amp.* with no native equivalent
    models: dict[str, str] = field(default_factory=dict)  # optimizer -> model code

    @property
    def unused_imports(self) -> list[Note]:
        """`from apex import amp` in a script that never calls it: it trains in FP32."""
        if self:
            return []
        return [Note(APEX_IMPORT_UNUSED, statement,
                     "apex.amp is imported but never called: this script "
                     "trained in FP32 and is rewritten; the import can go (apex.amp was removed "
                     "from apex in 2025)") for statement in self.imports]

    def __bool__(self) -> bool:
        """apex.amp is called (an import alone, left over, changes nothing: FP32 script)."""
        return bool(self.initialize or self.scale_loss or self.master_params
                    or self.state_entries or self.state_statements or self.unsupported)


def apex_amp(facts: ModuleFacts) -> ApexAmp:
    found = ApexAmp()
    targets = facts.imports.aliases.values()
    if not any(t == "apex" or t == "apex.amp" or t.startswith("apex.amp.") for t in targets):
        return found
    package = _package_for_amp(facts)  # `import apex`, only ever used as `apex.amp`
    for statement in facts.statements:
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(s, cst.ImportFrom | cst.Import) and _imports_apex_amp(s, package)
                for s in statement.body):
            found.imports.append(statement)
        elif isinstance(statement, cst.With) and len(statement.items) == 1:
            item = statement.items[0].item
            if isinstance(item, cst.Call) and _amp_function(item, facts) == "scale_loss":
                found.scale_loss.append(statement)
    for site in facts.calls:
        name = _amp_function(site.call, facts)
        if name == "initialize":
            found.initialize.append((site.statement, site.call))
            _pair_models(site.call, found.models)
        elif name == "master_params":
            found.master_params.append(site.call)
        elif name == "state_dict":
            _state_entry(site.call, site.statement, found)
        elif name == "load_state_dict":
            found.state_statements.append(site.statement)
        elif name is not None and name != "scale_loss":
            found.unsupported.append(site.call)
    return found


def _imports_apex_amp(node: cst.Import | cst.ImportFrom, package_for_amp: bool) -> bool:
    """`from apex import amp [as x]`, `import apex.amp as amp`, or `import apex[.amp]` where
    `package_for_amp`: names used for apex.amp alone."""
    if isinstance(node, cst.ImportFrom):
        module = dotted(node.module) if node.module is not None else ""
        names = [] if isinstance(node.names, cst.ImportStar) else [
            dotted(a.name) for a in node.names]
        return module == "apex.amp" or (module == "apex" and names == ["amp"])
    return all((dotted(a.name) == "apex.amp" and a.asname is not None)
               or (dotted(a.name) in ("apex", "apex.amp") and a.asname is None
                   and package_for_amp) for a in node.names)


def _package_for_amp(facts: ModuleFacts) -> bool:
    """`import apex` (or `import apex.amp`) binds `apex`, and every use of the name is
    `apex.amp` (not `apex.parallel`), at least one: the import goes with apex.amp."""
    if facts.imports.aliases.get("apex") != "apex":
        return False
    counts = {"names": 0, "chains": 0}  # uses of `apex`; of them, `apex.amp`
    for node in descendants(facts.module):
        kind = type(node)
        sign = -1 if kind is cst.Import or kind is cst.ImportFrom else 1  # not the import's own
        for inner in descendants(node) if sign < 0 else (node,):
            if type(inner) is cst.Name and inner.value == "apex":
                counts["names"] += sign
            elif type(inner) is cst.Attribute and dotted(inner) == "apex.amp":
                counts["chains"] += sign
    return counts["chains"] > 0 and counts["names"] == counts["chains"]


def _amp_function(call: cst.Call, facts: ModuleFacts) -> str | None:
    resolved = facts.imports.resolve(call.func) or ""
    if resolved.startswith("apex.amp."):
        return resolved.removeprefix("apex.amp.")
    return None


def initialized(call: cst.Call) -> list[cst.BaseExpression]:
    """What `amp.initialize(models, optimizers=None, ...)` was given and returns: the models,
    and the optimizers when given, positionally or by keyword (`models=model`)."""
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    models = positional[0] if positional else keywords.get("models")
    optimizers = positional[1] if len(positional) > 1 else keywords.get("optimizers")
    return [node for node in (models, optimizers) if node is not None]


def _pair_models(call: cst.Call, models: dict[str, str]) -> None:
    """`amp.initialize(model, optimizer)` / `([m1, m2], [o1, o2])`: which model each trains."""
    given = initialized(call)
    if len(given) < 2:
        return
    model_nodes, optimizer_nodes = given
    if isinstance(model_nodes, cst.List) and isinstance(optimizer_nodes, cst.List):
        pairs = zip(model_nodes.elements, optimizer_nodes.elements, strict=False)
        for model, optimizer in pairs:
            models[dotted(optimizer.value) or ""] = dotted(model.value) or ""
    elif dotted(model_nodes) and dotted(optimizer_nodes):
        models[dotted(optimizer_nodes) or ""] = dotted(model_nodes) or ""


def _state_entry(call: cst.Call, statement: Statement, found: ApexAmp) -> None:
    for node in descendants(statement):
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement) and element.value is call:
                    found.state_entries.append((node, element))
                    return
    found.state_statements.append(statement)
