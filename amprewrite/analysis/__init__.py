"""Analysis: facts about a module's training steps. Nothing here changes the tree."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.amp_flags import AmpFlag, amp_flag
from amprewrite.analysis.amp_usage import AmpUsage, amp_usage
from amprewrite.analysis.apex_amp import ApexAmp, apex_amp
from amprewrite.analysis.autocast_values import AutocastValues, autocast_values
from amprewrite.analysis.checkpoints import Checkpoints, analyse_checkpoints
from amprewrite.analysis.custom_functions import CustomFunction, custom_functions
from amprewrite.analysis.data_inits import model_module_data_inits
from amprewrite.analysis.deprecated_amp import DeprecatedAmp, deprecated_amp
from amprewrite.analysis.distributions import distribution_inputs
from amprewrite.analysis.dtype.flow import Flow
from amprewrite.analysis.ema_buffers import buffer_products
from amprewrite.analysis.entry_point import EntryPoint, entry_point, shuffled_loaders
from amprewrite.analysis.escapes import Escape, Escapes, dtype_flow, find_escapes
from amprewrite.analysis.evaluation import analyse_evaluation
from amprewrite.analysis.existing_amp import AmpInTraining, amp_in_training, existing_amp
from amprewrite.analysis.facts import CallSite, ModuleFacts, collect
from amprewrite.analysis.float16_constants import (
    Float16Constants,
    float16_constants,
    model_module_fills,
)
from amprewrite.analysis.fp32_forwards import forwards_left_fp32
from amprewrite.analysis.frameworks import FrameworkSettings, framework_settings
from amprewrite.analysis.function_regions import FunctionRegions, place_regions
from amprewrite.analysis.gram_matrices import gram_matrices
from amprewrite.analysis.hazards import manual_casts, unscaled_autograd_grad, uses_fsdp
from amprewrite.analysis.hook_statistics import scaled_statistics
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.lint import Lint, lint
from amprewrite.analysis.optimizer_builds import OptimizerBuild, held_builds, optimizer_builds
from amprewrite.analysis.ray_train import RayAmp, ray_amp
from amprewrite.analysis.schedulers import GuardedScheduler, schedulers_after_steps
from amprewrite.analysis.sharding import ShardingWrap, sharding_wraps
from amprewrite.analysis.sigmoid_outputs import SaturatingInput, saturating_inputs
from amprewrite.analysis.stored_forwards import forwards_elsewhere
from amprewrite.analysis.trainer_apis import TrainerApis, trainer_apis
from amprewrite.analysis.training_step import Note, Region, TrainingSteps, analyse_training
from amprewrite.analysis.unguarded_forwards import forwards_without_no_grad
from amprewrite.analysis.unsafe_losses import SplitRegions, split_unsafe_losses, unsafe_helpers

if TYPE_CHECKING:
    from amprewrite.project.links import ModuleLinks


class ModuleAnalysis:
    """Every fact the rules need about one module. Each is computed on first use, so a recipe
    pays only for the facts it reads (a migration needs no training step analysis)."""

    def __init__(
        self, module: cst.Module, scaler_arguments: tuple[str, ...] | None = None,
        project_kinds: Callable[[str], Kind | None] | None = None,
        source: bytes | None = None,
    ):
        self.facts: ModuleFacts = collect(module, source)
        # `project_kinds`: what the project's functions this module imports return
        self.kinds = KindTable(self.facts, project_kinds)
        # The grad scaler's arguments as the script's own source text, carried forward from
        # a migration (apex's `opt_level=args.opt_level`); None: built from the options.
        self.scaler_arguments = scaler_arguments
        # How the grad scaler crosses into and out of this module, when it is rewritten as
        # part of a project (`amprewrite.project`); None: a file on its own.
        self.links: ModuleLinks | None = None

    @cached_property
    def existing_amp(self) -> str | None:
        """The AMP API the module already uses, if any."""
        return existing_amp(self.facts)

    @cached_property
    def deprecated(self) -> DeprecatedAmp:
        """torch.cuda.amp / torch.cpu.amp uses to migrate."""
        return deprecated_amp(self.facts)

    @cached_property
    def apex(self) -> ApexAmp:
        """apex.amp uses to migrate."""
        return apex_amp(self.facts)

    @cached_property
    def ray(self) -> RayAmp:
        """Ray Train's deprecated AMP helpers to migrate."""
        return ray_amp(self.facts)

    @cached_property
    def trainer_apis(self) -> TrainerApis:
        """Determined trials, Enchanter runners."""
        return trainer_apis(self.facts, self.kinds)

    @cached_property
    def entry(self) -> EntryPoint:
        """Where the script starts (for --reproducible)."""
        return entry_point(self.facts)

    @cached_property
    def loaders(self) -> list[CallSite]:
        """Shuffled training DataLoaders (for --reproducible)."""
        return shuffled_loaders(self.facts)

    @cached_property
    def frameworks(self) -> FrameworkSettings:
        """The framework owning precision (Accelerate, Lightning, Hugging Face, TRL,
        DeepSpeed), if any, and where its switch is set."""
        return framework_settings(
            self.facts, lambda: self.training.found or self.existing_amp is not None)

    @property
    def framework(self) -> str | None:
        return self.frameworks.framework

    @cached_property
    def training(self) -> TrainingSteps:
        return analyse_training(self.facts, self.kinds)

    @cached_property
    def function_regions(self) -> FunctionRegions:
        """Regions placed by what called functions do."""
        return place_regions(self.training, self.facts, self.kinds)

    @cached_property
    def amp_in_training(self) -> AmpInTraining:
        """Does training use the module's AMP (or only evaluation)?"""
        return amp_in_training(self.facts, self.function_regions.all_regions,
                               self.autocast_values)

    @cached_property
    def autocast_values(self) -> AutocastValues:
        """The autocasts the module builds and the `with` items that enter them."""
        return autocast_values(self.facts)

    @cached_property
    def amp_flag(self) -> AmpFlag | None:
        """The flag every grad scaler and autocast of the module is behind, if one is."""
        return amp_flag(self.facts, self.autocast_values)

    @cached_property
    def _loss_helpers(self) -> dict[str, bool]:
        return unsafe_helpers(self.facts, self.kinds)

    def _split(self, regions: list[Region]) -> SplitRegions:
        return split_unsafe_losses(regions, self.facts, self.kinds, self._loss_helpers)

    @cached_property
    def training_regions(self) -> SplitRegions:
        """Forward + loss regions, unsafe losses cut out."""
        return self._split(self.function_regions.regions)

    @cached_property
    def helper_regions(self) -> SplitRegions:
        """Inside forward helpers shared with evaluation."""
        return self._split(self.function_regions.helpers)

    @cached_property
    def producer_regions(self) -> SplitRegions:
        """Where a model's stored outputs are computed."""
        return self._split(self.function_regions.producers)

    @cached_property
    def evaluation_regions(self) -> SplitRegions:
        """Forward passes without gradients; none when the training step stays FP32 (their
        outputs may feed it: a TD target, a teacher's logits)."""
        if self.training.refused:
            return self._split([])
        placed = self.function_regions.all_regions
        return self._split([
            region for region in analyse_evaluation(self.facts, self.kinds, placed)
            if not self.amp_in_training.covers(region, self.facts)])

    @property
    def _splits(self) -> list[SplitRegions]:
        return [self.training_regions, self.helper_regions, self.producer_regions,
                self.evaluation_regions]

    @cached_property
    def _regions(self) -> list[Region]:
        return [region for split in self._splits for region in split.regions]

    @cached_property
    def dtype_flow(self) -> Flow:
        """The precision of values, the regions and the forwards kept in autocast low."""
        return dtype_flow(self.facts, self.kinds, self._regions,
                          [n for s in self._splits for n in s.forwards])

    @cached_property
    def scaled_statistics(self) -> list[cst.Call]:
        """Registrations of backward hooks that keep the (scaled) gradients they see."""
        return scaled_statistics(self.facts)

    @cached_property
    def escapes(self) -> Escapes:
        """Low-precision values reaching float32 uses after their region."""
        return find_escapes(self.dtype_flow, [
            *self.function_regions.casts, *(n for s in self._splits for n in s.float32_inputs)])

    @cached_property
    def saturating(self) -> list[SaturatingInput]:
        """Sigmoid probabilities fed to BCE under autocast."""
        return saturating_inputs([m for s in self._splits for m in s.moved_out], self.facts)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        return analyse_checkpoints(self.facts, self.kinds)

    @cached_property
    def schedulers(self) -> list[GuardedScheduler]:
        return schedulers_after_steps(self.facts, self.kinds, self.training.updates_after,
                                      self.training.steps)

    @cached_property
    def hazards(self) -> list[Note]:
        """Risky code reported, not changed."""
        training_functions = {site.function for site in self.training.backwards}
        return [*manual_casts(self.facts), *unscaled_autograd_grad(self.facts, training_functions),
                *self.amp_in_training.notes, *self.apex.unused_imports,
                *gram_matrices(self.facts, self.kinds, self._regions),
                *forwards_elsewhere(self.training_regions.regions, self.producer_regions.regions,
                                    self.facts, self.kinds),
                *self._forwards_in_fp32, *self.buffer_products]

    @cached_property
    def _forwards_in_fp32(self) -> list[Note]:
        """Forward passes no region covers: on the training path (AMP215), then the others
        outside `no_grad` (AMP217), each once."""
        if not self.training.found or self.escapes.stuck:
            return []
        on_path = forwards_left_fp32(self.facts, self.kinds, self.training, self._regions,
                                     [n for s in self._splits for n in s.forwards])
        others = forwards_without_no_grad(self.facts, self.kinds, self._regions,
                                          {id(note.node) for note in on_path})
        return [*on_path, *others]

    @cached_property
    def buffer_products(self) -> list[Note]:
        """Products with a buffer a model's forward updates (an EMA codebook): float16
        overflows them."""
        return buffer_products(self.facts)

    @cached_property
    def sharded(self) -> bool:
        """FSDP: the scaler must be the sharded one."""
        return uses_fsdp(self.facts)

    @cached_property
    def sharding_wraps(self) -> list[ShardingWrap]:
        """FSDP wraps, for their mixed-precision policy."""
        return sharding_wraps(self.facts)

    @cached_property
    def custom_functions(self) -> list[CustomFunction]:
        return custom_functions(self.facts)

    @cached_property
    def optimizer_builds(self) -> list[OptimizerBuild]:
        """Where the stepped optimizers are built (here, or passed on to be stepped)."""
        links = self.links
        passed = frozenset(key for p in links.passes for key in p.optimizers) if (
            links) else frozenset()
        builds = optimizer_builds(self.facts, self.training.steps, passed)
        if links and links.base_home is not None:  # held for subclasses in other modules
            builds += held_builds(self.facts, self.kinds, links.base_home.cls,
                                  links.base_home.optimizers)
        return builds

    @cached_property
    def float16_constants(self) -> Float16Constants:
        """Fills and epsilons float16 cannot hold."""
        return float16_constants(self.dtype_flow, self._regions)

    @cached_property
    def model_fills(self) -> Float16Constants:
        """Fills float16 cannot hold in the forward passes of a module that only defines
        models: they run under a training script's autocast elsewhere."""
        return model_module_fills(Flow(self.facts, self.kinds, set()))

    @cached_property
    def model_data_inits(self) -> list[Escape]:
        """Assignments to a parameter's `.data` in the forward passes of a module that only
        defines models: they run under a training script's autocast elsewhere."""
        return model_module_data_inits(self.facts, self.kinds)

    @cached_property
    def distribution_inputs(self) -> list[cst.BaseExpression]:
        """Distribution arguments under autocast."""
        return distribution_inputs(self._regions, self.facts, self.kinds,
                                   self.function_regions.casts)

    @property
    def has_work(self) -> bool:
        return (self.training.found or bool(self.evaluation_regions.regions)
                or bool(self.custom_functions) or bool(self.links))

    @property
    def partial_amp(self) -> bool:
        """AMP covers evaluation only while training runs in FP32: the training is rewritten."""
        return not self.amp_in_training.trains and self.training.found

    @cached_property
    def amp_usage(self) -> AmpUsage:
        """The AMP amprewrite itself wrote (what O0 takes out again)."""
        return amp_usage(self.facts)

    @cached_property
    def amp_mistakes(self) -> Lint:
        """The AMP mistakes of a module that already uses AMP."""
        return lint(self.facts, self.kinds, self.amp_usage, self.checkpoints)


def analyse(
    module: cst.Module, scaler_arguments: tuple[str, ...] | None = None,
    source: bytes | None = None,
) -> ModuleAnalysis:
    """The analysis of `module` (parsed from `source`, when given); `scaler_arguments` are
    what a migration carried forward."""
    return ModuleAnalysis(module, scaler_arguments, source=source)
