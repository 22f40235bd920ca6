"""Keys: the dotted text that names a value (`scaler`, `self.opt_d`, `self.optims[name]`), and
the qualified names imports give them."""

from __future__ import annotations

import ast


def key_of(node: ast.expr) -> str | None:
    """The key of a name, an attribute chain or a subscript by a constant or a name; None for
    anything else (a call, an arithmetic expression)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = key_of(node.value)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, ast.Subscript):
        base = key_of(node.value)
        index = node.slice
        if base is None:
            return None
        if isinstance(index, ast.Constant) and isinstance(index.value, str | int):
            return f"{base}[{index.value!r}]"
        inner = key_of(index)
        return None if inner is None else f"{base}[{inner}]"
    return None


def root_of(key: str) -> str:
    """The first name of a key: `self` of `self.opt`, `optims` of `optims['g'].x`."""
    end = len(key)
    for stop in (".", "["):
        at = key.find(stop)
        if at != -1:
            end = min(end, at)
    return key[:end]


def rebase(key: str, root: str, replacement: str) -> str:
    """`key` with its first name `root` replaced by `replacement`."""
    return replacement + key[len(root):]


class Imports:
    """What each imported name of a module stands for (`nn` -> `torch.nn`)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def add(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    self.names[alias.asname] = alias.name
                else:
                    first = alias.name.split(".", 1)[0]
                    self.names.setdefault(first, first)
        elif node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def resolve(self, node: ast.expr) -> str | None:
        """The qualified name of a name or attribute chain (`torch.cuda.amp.GradScaler` for
        `amp.GradScaler` after `from torch.cuda import amp`); its own text if not imported."""
        key = key_of(node)
        if key is None or "[" in key:
            return None
        root = root_of(key)
        qualified = self.names.get(root)
        return key if qualified is None else rebase(key, root, qualified)


def last_name(qualified: str | None) -> str:
    """The last part of a qualified name (`GradScaler` of `torch.amp.GradScaler`)."""
    return "" if qualified is None else qualified.rsplit(".", 1)[-1]
