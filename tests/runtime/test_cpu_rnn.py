"""Recurrent layers under the runtime's CPU autocast, in bfloat16 and in float16.

On a CPU whose oneDNN has no LSTM kernel for a low-precision dtype (an AVX2 machine: neither
bfloat16 nor float16; a CPU with AMX: no float16), `torch.autocast("cpu")` alone makes every
LSTM forward raise "could not create a primitive descriptor for the LSTM forward propagation
primitive"; the runtime's regions run the LSTM in float32 there and the rest of the region in
low precision.
"""

from __future__ import annotations

import pytest
import torch
from amprewrite_runtime import autocast
from amprewrite_runtime.cpu_rnn import onednn_runs_lstm

DTYPES = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", [torch.nn.LSTM, torch.nn.GRU], ids=lambda c: c.__name__)
def test_recurrent_model_trains_under_cpu_autocast(layer: type, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    rnn = layer(4, 8, num_layers=2, batch_first=True, bidirectional=True)
    head = torch.nn.Linear(16, 1)
    x, y = torch.randn(3, 5, 4), torch.randn(3, 5, 1)
    with autocast(dtype):
        out, _ = rnn(x)
        pred = head(out)
    assert pred.dtype == dtype  # the region is low precision ...
    if layer is torch.nn.LSTM:  # ... the LSTM runs in what oneDNN can run
        assert out.dtype == (dtype if onednn_runs_lstm(dtype) else torch.float32)
    torch.nn.functional.mse_loss(pred.float(), y).backward()
    grads = [p.grad for p in rnn.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    with torch.no_grad():  # close to float32
        reference = head(rnn(x)[0])
    torch.testing.assert_close(pred.detach().float(), reference, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_autocast_lstm_fails_where_onednn_lacks_the_dtype(dtype: torch.dtype) -> None:
    """What the runtime works around, tried in a fresh process (a torch that fixes it makes
    this test fail: then the workaround can go)."""
    if onednn_runs_lstm(dtype):
        pytest.skip(f"this CPU's oneDNN runs {dtype} LSTMs")
    import subprocess
    import sys

    code = (f"import torch\nwith torch.autocast('cpu', dtype={dtype}):\n"
            "    torch.nn.LSTM(4, 8)(torch.randn(3, 2, 4))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert "could not create a primitive descriptor for the LSTM" in proc.stderr


def test_the_probe_draws_nothing_from_the_scripts_rng() -> None:
    """Else a rewritten script's random stream (and its losses) would differ from FP32's."""
    onednn_runs_lstm.cache_clear()
    state = torch.get_rng_state()
    for dtype in DTYPES:
        onednn_runs_lstm(dtype)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_probe_tries_the_cpu_whatever_the_default_device() -> None:
    """A script that sets another default device (found on a GPU: `cuda`; `meta` stands in
    here) still trains its CPU LSTMs on the CPU: the probe must try the CPU's kernel, and draw
    nothing from that device's generator (it moved a CUDA script's DataLoader shuffling)."""
    onednn_runs_lstm.cache_clear()
    on_cpu = [onednn_runs_lstm(dtype) for dtype in DTYPES]
    onednn_runs_lstm.cache_clear()
    torch.set_default_device("meta")
    try:
        assert [onednn_runs_lstm(dtype) for dtype in DTYPES] == on_cpu
    finally:
        torch.set_default_device(None)
        onednn_runs_lstm.cache_clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_probe_answers_for_training_when_first_asked_without_grad(dtype: torch.dtype) -> None:
    """A first region may be an evaluation under no_grad: the probe still tries the training
    primitive, which is the one that fails where the inference one works (float16, AMX)."""
    onednn_runs_lstm.cache_clear()
    with torch.no_grad():
        without_grad = onednn_runs_lstm(dtype)
    onednn_runs_lstm.cache_clear()
    with torch.inference_mode():
        in_inference = onednn_runs_lstm(dtype)
    onednn_runs_lstm.cache_clear()
    assert without_grad == in_inference == onednn_runs_lstm(dtype)
