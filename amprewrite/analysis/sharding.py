"""FSDP wraps: `fully_shard(module)` (FSDP2) and `FullyShardedDataParallel(module)` (FSDP1).

Each takes a mixed-precision policy of its own (`mp_policy=MixedPrecisionPolicy(...)`,
`mixed_precision=MixedPrecision(...)`): parameters all-gathered in the low-precision dtype
(half the traffic and memory of float32) and gradients reduced in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts

# The wrap's qualified name -> (the policy keyword, the policy class's name in its module).
_WRAPS = {
    "fully_shard": ("mp_policy", "MixedPrecisionPolicy"),
    "FullyShardedDataParallel": ("mixed_precision", "MixedPrecision"),
}
_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


@dataclass(frozen=True)
class ShardingWrap:
    """One FSDP wrap call and the policy it takes."""

    site: CallSite
    api: str  # "fully_shard" or "FullyShardedDataParallel"
    keyword: str  # "mp_policy" or "mixed_precision"
    policy_class: str  # qualified: "torch.distributed.fsdp.MixedPrecisionPolicy"
    current: cst.Arg | None  # the policy already passed, or the `**mapping` that may hold it

    @property
    def call(self) -> cst.Call:
        return self.site.call


def sharding_wraps(facts: ModuleFacts) -> list[ShardingWrap]:
    found = []
    for site in facts.calls:
        name = facts.imports.resolve(site.call.func) or ""
        module, _, api = name.rpartition(".")
        if api not in _WRAPS or not module.startswith(_MODULES):
            continue
        keyword, policy = _WRAPS[api]
        home = next(m for m in _MODULES if module.startswith(m))
        current = next((a for a in site.call.args if a.star == "**" or (
            a.keyword is not None and a.keyword.value == keyword)), None)
        found.append(ShardingWrap(site, api, keyword, f"{home}.{policy}", current))
    return found
