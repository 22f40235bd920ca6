"""Every finding code: imports each module that may declare one (the catalog itself imports
none of them) and looks codes up in the whole catalog."""

from __future__ import annotations

import importlib
import pkgutil

from amprewrite.catalog import Code, Severity, declared, declared_code

_PACKAGES = ("amprewrite.analysis", "amprewrite.rules", "amprewrite.recipes", "amprewrite.project",
             "amprewrite.protocol")

_loaded = False


def codes() -> dict[str, Code]:
    """Every declared code by id, in id order (imports, the first time, every module that may
    declare one)."""
    global _loaded
    if not _loaded:
        importlib.import_module("amprewrite.findings")
        for package_name in _PACKAGES:
            package = importlib.import_module(package_name)
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{package_name}.{module.name}")
        _loaded = True
    return dict(sorted(declared().items()))


def lookup(code_id: str) -> Code | None:
    """The declared code with this id; None for an unregistered one (a plugin's, a test's)."""
    code = declared_code(code_id)
    if code is None and not _loaded:
        return codes().get(code_id)  # a module that declares it may not be imported yet
    return code


def severity_of(code_id: str) -> Severity:
    """A code's severity; an unregistered code counts as a change (it is shown)."""
    code = lookup(code_id)
    return code.severity if code is not None else Severity.CHANGE
