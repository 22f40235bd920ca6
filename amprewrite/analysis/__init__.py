"""Analysis: facts about a module's training steps. Nothing here changes the tree."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage, amp_usage
from amprewrite.analysis.apex_amp import ApexAmp, apex_amp
from amprewrite.analysis.checkpoints import Checkpoints, analyse_checkpoints
from amprewrite.analysis.custom_functions import CustomFunction, custom_functions
from amprewrite.analysis.deprecated_amp import DeprecatedAmp, deprecated_amp
from amprewrite.analysis.distributions import distribution_inputs
from amprewrite.analysis.entry_point import EntryPoint, entry_point, shuffled_loaders
from amprewrite.analysis.escapes import Escapes, find_escapes
from amprewrite.analysis.evaluation import analyse_evaluation
from amprewrite.analysis.existing_amp import AmpInTraining, amp_in_training, existing_amp
from amprewrite.analysis.facts import CallSite, ModuleFacts, collect
from amprewrite.analysis.float16_constants import Float16Constants, float16_constants
from amprewrite.analysis.frameworks import (
    PrecisionSwitch,
    framework_owns_precision,
    precision_switches,
)
from amprewrite.analysis.function_regions import FunctionRegions, place_regions
from amprewrite.analysis.gram_matrices import gram_matrices
from amprewrite.analysis.hazards import manual_casts, unscaled_autograd_grad, uses_fsdp
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.lint import Lint, lint
from amprewrite.analysis.optimizer_builds import OptimizerBuild, optimizer_builds
from amprewrite.analysis.ray_train import RayAmp, ray_amp
from amprewrite.analysis.schedulers import GuardedScheduler, schedulers_after_steps
from amprewrite.analysis.sigmoid_outputs import SaturatingInput, saturating_inputs
from amprewrite.analysis.trainer_apis import TrainerApis, trainer_apis
from amprewrite.analysis.training_step import Note, TrainingSteps, analyse_training
from amprewrite.analysis.unsafe_losses import SplitRegions, split_unsafe_losses, unsafe_helpers


@dataclass
class ModuleAnalysis:
    """Every fact the rules need about one module, from one analysis."""

    facts: ModuleFacts
    kinds: KindTable
    existing_amp: str | None  # the AMP API the module already uses, if any
    amp_in_training: AmpInTraining  # does training use it (or only evaluation)?
    deprecated: DeprecatedAmp  # torch.cuda.amp / torch.cpu.amp uses to migrate
    apex: ApexAmp  # apex.amp uses to migrate
    ray: RayAmp  # Ray Train's deprecated AMP helpers to migrate
    trainer_apis: TrainerApis  # Determined trials, Enchanter runners
    entry: EntryPoint  # where the script starts (for --reproducible)
    loaders: list[CallSite]  # shuffled training DataLoaders (for --reproducible)
    framework: str | None  # accelerate / lightning: the framework owns precision
    switches: list[PrecisionSwitch]  # its constructors, to switch mixed precision on
    training: TrainingSteps
    training_regions: SplitRegions  # forward + loss regions, unsafe losses cut out
    function_regions: FunctionRegions  # regions placed by what called functions do
    helper_regions: SplitRegions  # inside forward helpers shared with evaluation
    producer_regions: SplitRegions  # where a model's stored outputs are computed
    evaluation_regions: SplitRegions
    escapes: Escapes  # low-precision values reaching float32 uses after their region
    saturating: list[SaturatingInput]  # sigmoid probabilities fed to BCE under autocast
    checkpoints: Checkpoints
    schedulers: list[GuardedScheduler]
    hazards: list[Note]  # risky code reported, not changed
    sharded: bool  # FSDP: the scaler must be the sharded one
    custom_functions: list[CustomFunction]
    optimizer_builds: list[OptimizerBuild]  # where the stepped optimizers are built
    float16_constants: Float16Constants  # fills and epsilons float16 cannot hold
    distribution_inputs: list[cst.BaseExpression]  # distribution arguments under autocast

    @property
    def has_work(self) -> bool:
        return (self.training.found or bool(self.evaluation_regions.regions)
                or bool(self.custom_functions))

    @property
    def partial_amp(self) -> bool:
        """AMP covers evaluation only while training runs in FP32: the training is rewritten."""
        return not self.amp_in_training.trains and self.training.found

    @cached_property
    def amp_usage(self) -> AmpUsage:
        """The AMP amprewrite itself wrote (what O0 takes out again); computed on demand."""
        return amp_usage(self.facts)

    @cached_property
    def amp_mistakes(self) -> Lint:
        """The AMP mistakes of a module that already uses AMP; computed on demand."""
        return lint(self.facts, self.kinds, self.amp_usage, self.checkpoints)


def analyse(module: cst.Module) -> ModuleAnalysis:
    facts = collect(module)
    amp = existing_amp(facts)
    kinds = KindTable(facts)
    training = analyse_training(facts, kinds)
    placed = place_regions(training, facts, kinds)
    amp_training = amp_in_training(facts, placed.all_regions)
    evaluation = [region for region in analyse_evaluation(facts, kinds, placed.all_regions)
                  if not amp_training.covers(region, facts)]
    training_functions = {site.function for site in training.backwards}
    loss_helpers = unsafe_helpers(facts, kinds)
    training_regions = split_unsafe_losses(placed.regions, facts, kinds, loss_helpers)
    helper_regions = split_unsafe_losses(placed.helpers, facts, kinds, loss_helpers)
    producer_regions = split_unsafe_losses(placed.producers, facts, kinds, loss_helpers)
    evaluation_regions = split_unsafe_losses(evaluation, facts, kinds, loss_helpers)
    splits = [training_regions, helper_regions, producer_regions, evaluation_regions]
    apex = apex_amp(facts)
    return ModuleAnalysis(
        facts=facts,
        kinds=kinds,
        existing_amp=amp,
        amp_in_training=amp_training,
        deprecated=deprecated_amp(facts),
        apex=apex,
        ray=ray_amp(facts),
        trainer_apis=trainer_apis(facts, kinds),
        entry=entry_point(facts),
        loaders=shuffled_loaders(facts),
        framework=framework_owns_precision(facts),
        switches=precision_switches(facts),
        training=training,
        training_regions=training_regions,
        function_regions=placed,
        helper_regions=helper_regions,
        producer_regions=producer_regions,
        evaluation_regions=evaluation_regions,
        escapes=find_escapes(facts, kinds, [r for s in splits for r in s.regions],
                             [*placed.casts, *(n for s in splits for n in s.float32_inputs)],
                             [n for s in splits for n in s.forwards]),
        saturating=saturating_inputs([m for s in splits for m in s.moved_out], facts),
        checkpoints=analyse_checkpoints(facts, kinds),
        schedulers=schedulers_after_steps(facts, kinds, training.updates_after,
                                          training.steps),
        hazards=[*manual_casts(facts), *unscaled_autograd_grad(facts, training_functions),
                 *amp_training.notes, *apex.unused_imports,
                 *gram_matrices(facts, kinds, [r for s in splits for r in s.regions])],
        sharded=uses_fsdp(facts),
        custom_functions=custom_functions(facts),
        optimizer_builds=optimizer_builds(facts, training.steps),
        float16_constants=float16_constants(facts, kinds, [r for s in splits for r in s.regions]),
        distribution_inputs=distribution_inputs([r for s in splits for r in s.regions], facts),
    )
