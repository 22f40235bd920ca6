"""Which frameworks own a file's precision, and how their switches are written: the unit
shapes beside the fixture pairs (`fixtures/framework_*`, `fixtures/rule_fsdp*`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

LOOP = '''\
import torch
{imports}

{setup}
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
'''


def _rewrite(source: str, **options: object) -> tuple[str, str]:
    result = rewrite_source(source.encode(), Options(**options))  # type: ignore[arg-type]
    return result.source.decode(), "\n".join(f.format("t.py") for f in result.findings)


@pytest.mark.parametrize(("imports", "setup"), [
    ("from accelerate.utils import set_seed", "set_seed(0)"),
    ("import lightning as L", "L.seed_everything(0)"),
    ("from transformers import AutoModel", "encoder = AutoModel.from_config(config)"),
    ("from transformers import HfArgumentParser", "(args,) = HfArgumentParser(Args).parse_args()"),
])
def test_a_helper_of_a_framework_leaves_the_loop_to_the_rewrite(imports: str, setup: str) -> None:
    """Only what runs the step (an Accelerator, a Trainer, a LightningModule, a DeepSpeed
    engine) owns precision: a plain loop that imports a helper gets autocast and a scaler."""
    output, findings = _rewrite(LOOP.format(imports=imports, setup=setup))
    assert "scaler.scale(loss).backward()" in output, findings
    assert "AMP42" not in findings


def test_trainer_arguments_from_a_mapping_are_reported_with_the_flag() -> None:
    source = '''\
from transformers import Trainer, TrainingArguments

args = TrainingArguments(**config["training"])
Trainer(model=model, args=args).train()
'''
    output, findings = _rewrite(source)
    assert output == source
    assert ('AMP423 `TrainingArguments(...)` is built from `**config["training"]`: set '
            '`bf16=True` (`fp16=True` on GPUs older than compute capability 8.0) there'
            ) in findings


def test_trainer_told_to_use_the_cpu_gets_bf16_whatever_the_dtype() -> None:
    source = '''\
from transformers import TrainingArguments

args = TrainingArguments(output_dir="out", use_cpu=True)
'''
    for dtype in (None, "float16", "bfloat16"):
        output, _ = _rewrite(source, dtype=dtype)
        assert '    use_cpu=True,\n    bf16=mixed_precision_flag("bf16", "bfloat16"),\n' in output
        plain, _ = _rewrite(source, dtype=dtype, plain=True)
        assert 'TrainingArguments(output_dir="out", use_cpu=True, bf16=True)' in plain


def test_a_run_time_choice_name_taken_by_the_script_is_imported_under_another() -> None:
    source = '''\
from accelerate import Accelerator

accelerate_mixed_precision = False
accelerator = Accelerator()
'''
    output, _ = _rewrite(source)
    assert ("from amprewrite_runtime import accelerate_mixed_precision as "
            "amp_accelerate_mixed_precision") in ast.unparse(ast.parse(output))
    assert "mixed_precision=amp_accelerate_mixed_precision()" in output


def test_deepspeed_config_from_a_parameter_is_reported() -> None:
    source = '''\
import deepspeed


def train(model, config):
    engine, _, _, _ = deepspeed.initialize(model=model, config=config)
    for batch in loader:
        engine.backward(engine(batch))
        engine.step()
'''
    output, findings = _rewrite(source, dtype="bfloat16")
    assert output == source
    assert findings == ('t.py:5:64: AMP423 the DeepSpeed config is `config`: add '
                        '`"bf16": {"enabled": true}` there; left unchanged')


def test_deepspeed_config_that_sets_a_precision_is_left_alone() -> None:
    source = '''\
import deepspeed

config = {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 0}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
'''
    output, findings = _rewrite(source)
    assert output == source
    assert "AMP421 the DeepSpeed config already sets" in findings


FSDP = '''\
{imports}

model = build()
{wrap}
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize("wrap", ["fully_shard(model, mp_policy=policy)",
                                  "fully_shard(model, **fsdp_kwargs)"])
def test_fsdp_wrap_that_chooses_its_precision_keeps_it(wrap: str) -> None:
    output, findings = _rewrite(FSDP.format(
        imports="import torch\nfrom torch.distributed.fsdp import fully_shard", wrap=wrap))
    assert wrap in output and "MixedPrecisionPolicy" not in output
    assert "AMP225" in findings
    assert "with autocast():" in output and "GradScaler(sharded=True)" in output


def test_fsdp_policy_in_a_file_without_torch_imports_it() -> None:
    source = FSDP.format(imports="from torch.distributed._composable.fsdp import fully_shard",
                         wrap="fully_shard(model)").replace("torch.optim", "optim").replace(
        "torch.nn.functional", "F")
    output, findings = _rewrite(source, dtype="bfloat16", plain=True)
    assert "from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard" in (
        ast.unparse(ast.parse(output)))
    assert output.startswith("import torch\n")  # where isort puts it
    assert ("mp_policy = MixedPrecisionPolicy( param_dtype=torch.bfloat16, "
            "reduce_dtype=torch.float32 )") in " ".join(output.split())
    assert "AMP114" in findings


def test_fsdp_policy_is_bound_once_per_function() -> None:
    source = '''\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def train(model, loader):
    if wrap_blocks:
        for block in model.blocks:
            block = FSDP(block)
    model = FSDP(model)
    optimizer = torch.optim.AdamW(model.parameters())
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
'''
    output, _ = _rewrite(source, dtype="float16")
    assert output.count("mp_policy = MixedPrecision(") == 1
    assert output.index("mp_policy = ") < output.index("if wrap_blocks:")
    assert output.count("mixed_precision=mp_policy") == 2
    assert "GradScaler(dtype=\"float16\", sharded=True)" in output


def test_fsdp_gets_no_policy_at_o2() -> None:
    output, findings = _rewrite(FSDP.format(
        imports="import torch\nfrom torch.distributed.fsdp import fully_shard",
        wrap="fully_shard(model)"), opt_level="O2")
    assert "MixedPrecisionPolicy" not in output and "AMP114" not in findings


def test_fsdp2_model_upkeep_is_not_taken_for_forward_passes() -> None:
    """Materialising, resetting, unsharding, checkpointing and inspecting the model on the
    training path run no forward pass: no AMP215 (pytorch/examples' FSDP2 example)."""
    source = '''\
import torch
from torch.distributed.fsdp import fully_shard


def main(args, x, device):
    with torch.device("meta"):
        model = Transformer(args)
    fully_shard(model)
    inspect_model(model)
    model.to_empty(device=device)
    model.reset_parameters()
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    checkpointer.load_optim(model, optim)
    for _ in range(10):
        model.unshard()
        loss = model(x).sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
    checkpointer.save(model, optim)
'''
    output, findings = _rewrite(source)
    assert "AMP215" not in findings, findings
    assert "scaler.scale(loss).backward()" in output


def test_deepspeed_config_returned_by_a_function_of_the_module_is_edited() -> None:
    """`config=get_ds_config(args)` (DeepSpeedExamples' cifar10): the dict it returns."""
    source = '''\
import deepspeed


def get_ds_config(args):
    ds_config = {
        "train_batch_size": 16,
        "zero_optimization": {"stage": args.stage},
    }
    return ds_config


def main(args, model):
    ds_config = get_ds_config(args)
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config)
'''
    output, findings = _rewrite(source, dtype="bfloat16")
    assert '''        "zero_optimization": {"stage": args.stage},
        "bf16": {"enabled": mixed_precision_flag("bf16", "bfloat16")},
    }''' in output
    assert "AMP420 the DeepSpeed config owns precision" in findings


def test_switch_imports_go_where_isort_puts_them_without_torch(tmp_path: Path) -> None:
    """A Trainer-arguments module that imports transformers but not torch: `import torch`
    and the runtime's import join the transformers section, in isort's order."""
    source = '''\
"""Arguments."""
import os

from transformers import TrainingArguments

from mypkg.paths import OUTPUT


def training_arguments():
    return TrainingArguments(output_dir=os.path.join(OUTPUT, "run"))
'''
    output, _ = _rewrite(source)
    assert ("import os\n\nimport torch\nfrom amprewrite_runtime import mixed_precision_flag\n"
            "from transformers import TrainingArguments\n\nfrom mypkg") in output
    script = tmp_path / "args.py"
    script.write_text(output)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "I",
                           "--config=lint.isort.known-first-party = ['mypkg']", str(script)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(("source", "dtype", "written"), [
    ("import lightning as L\nimport torch\n\nfabric = L.Fabric(accelerator=\"cpu\")\n", None,
     'precision=os.environ.get("LT_PRECISION", "bf16-mixed" if use_bf16 else "16-mixed")'),
    ("from accelerate import Accelerator\n\naccelerator = Accelerator()\n", "float16",
     'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "fp16")'),
])
def test_the_plain_style_leaves_the_launchers_variable_the_last_word(
    source: str, dtype: str | None, written: str
) -> None:
    """`fabric run --precision` and `accelerate launch --mixed_precision` set a variable the
    framework reads only when the script passes no value: the plain style reads it first, and
    O0 takes it out again with the `import os` it added."""
    output, _ = _rewrite(source, plain=True, dtype=dtype)
    assert "".join(written.split()) in "".join(output.split())
    assert output.startswith("import os\n\n")  # a standard-library section of its own
    reverted, _ = _rewrite(output, plain=True, opt_level="O0")
    # the same code (a call the switch broke over lines stays so)
    assert ast.dump(ast.parse(reverted)) == ast.dump(ast.parse(source))
    assert reverted.startswith(source.split("\n")[0])  # no blank line where `import os` was


def test_o0_keeps_a_switch_the_author_set() -> None:
    source = 'import accelerate\n\naccelerator = accelerate.Accelerator(mixed_precision="fp16")\n'
    output, findings = _rewrite(source, opt_level="O0")
    assert output == source
    assert 'AMP429 `mixed_precision="fp16"` is the script\'s own setting' in findings


def test_the_authors_comments_stay_with_their_arguments() -> None:
    """The switch's arguments are laid out like the last one, without its comment: before,
    `report_to="none",  # no wandb` lent its comment to both new arguments (trl's tests)."""
    source = '''\
from transformers import Trainer, TrainingArguments


def main(model, data):
    args = TrainingArguments(
        output_dir="out",  # where checkpoints go
        report_to="none",  # no wandb
    )
    Trainer(model=model, args=args, train_dataset=data).train()
'''
    output, _ = _rewrite(source)
    assert '        output_dir="out",  # where checkpoints go\n' in output
    assert '        report_to="none",  # no wandb\n        bf16=' in output
    assert output.count("#") == 2


def test_a_switch_after_one_argument_and_a_comment_line_is_laid_out_as_an_argument() -> None:
    """accelerate's sp-alst example: `Accelerator(\\n    a=a,\\n    # b=...,\\n)`; before, the
    switch went to column 0 after a copy of the comment line."""
    source = '''\
from accelerate import Accelerator

accelerator = Accelerator(
    parallelism_config=parallelism_config,
    #    log_with="wandb",  # enable to log into wandb
)
'''
    output, _ = _rewrite(source)
    assert ('    parallelism_config=parallelism_config,\n'
            '    mixed_precision=accelerate_mixed_precision(),\n'
            '    #    log_with="wandb",  # enable to log into wandb\n)\n') in output
    assert output.count("log_with") == 1


@pytest.mark.parametrize(("handlers", "kept"), [
    ("[AORecipeKwargs(config=Float8LinearConfig())] if args.fp8 else []", True),
    ("kwargs", True),  # bound elsewhere: accelerate's fsdp2_fp8 example
    ("[DistributedDataParallelKwargs(find_unused_parameters=True)]", False),
])
def test_an_accelerator_with_the_scripts_own_float8_recipe_is_left_to_its_launcher(
    handlers: str, kept: bool
) -> None:
    source = f'''\
from accelerate import Accelerator
from accelerate.utils import AORecipeKwargs, DistributedDataParallelKwargs


def main(args, kwargs):
    accelerator = Accelerator(kwargs_handlers={handlers})
'''
    source = source if kept or "AORecipe" in handlers else source.replace(
        "AORecipeKwargs, ", "")
    output, findings = _rewrite(source)
    assert ("mixed_precision=" not in output) is kept
    assert ("AMP421" in findings and "float8 recipe (`AORecipeKwargs`" in findings) is kept
