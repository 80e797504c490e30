"""``channels_last`` and ``compile``: the same numbers in another memory layout / compiled code."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from ssl_app.models import encode_with
from tests.generic import set_up
from tests.helpers import compile_cheaply, dynamo_compiles, tiny_data, tiny_trainer

SMALL = dict(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)


def _batch(size: int = 16):
    generator = torch.Generator().manual_seed(1)
    views = [torch.randn(size, 3, 8, 8, generator=generator) for _ in range(2)]
    return views, torch.arange(size) % 3, torch.arange(size)


def _loss_and_grads(model):
    model.zero_grad(set_to_none=True)
    contrast = model.contrast(_batch())
    loss = model.loss(contrast).value
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_channels_last_puts_weights_and_inputs_in_nhwc_and_changes_no_number(method_case):
    """Catches the option doing nothing (weights or images left contiguous, so no NHWC kernel
    runs), an encoder left out (MoCo's key encoder), or a layout change that alters the loss or its
    gradients (every registered method: tests/generic.py)."""
    plain = set_up(method_case.build(channels_last=False)).train()
    nhwc = copy.deepcopy(plain)
    nhwc.memory_format = torch.channels_last
    nhwc.setup("fit")
    convs = [m for m in nhwc.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(m.weight.is_contiguous(memory_format=torch.channels_last) for m in convs)
    assert all(not m.weight.is_contiguous() for m in convs if m.weight.shape[-1] > 1)
    assert nhwc.to_memory_format(torch.randn(2, 3, 8, 8)).is_contiguous(memory_format=torch.channels_last)
    assert plain.to_memory_format(torch.randn(2, 3, 8, 8)).is_contiguous()
    loss_a, grads_a = _loss_and_grads(plain)
    loss_b, grads_b = _loss_and_grads(nhwc)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:  # other kernels sum in another order: compare the whole tensor's error
        error = (grads_b[name] - grads_a[name]).norm() / grads_a[name].norm().clamp_min(1e-12)
        assert error < 1e-4, (name, float(error))


def test_channels_last_runs_through_the_trainer_and_its_checkpoint_loads_into_a_plain_model(tmp_path):
    """Catches the option not reaching the model through the constructor, or NHWC weights that a
    model in the default layout cannot load (checkpoints must not depend on the option)."""
    torch.manual_seed(0)
    model = MemoryBank(loss=InfoNCE(0.2), channels_last=True, **SMALL)
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, datamodule=tiny_data())
    assert model.backbone[0].weight.is_contiguous(memory_format=torch.channels_last)
    trainer.save_checkpoint(tmp_path / "nhwc.ckpt")
    plain = MemoryBank.load_from_checkpoint(tmp_path / "nhwc.ckpt", loss=InfoNCE(0.2), channels_last=False)
    plain.eval(), model.eval()
    images = torch.randn(4, 3, 8, 8)
    torch.testing.assert_close(plain.embed(images), model.embed(images), rtol=1e-5, atol=1e-6)


def _is_nhwc(model) -> bool:
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.shape[-1] > 1]
    assert convs
    layouts = {m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous() for m in convs}
    assert len(layouts) == 1, "some convolutions were converted, others not"
    return layouts.pop()


def test_auto_layout_is_nhwc_when_the_trainer_trains_on_the_cpu(tmp_path):
    """Catches the default not reaching a real run (the CPU's 1.1–1.8× lost) or converting only
    the query encoder of MoCo."""
    torch.manual_seed(0)
    model = MoCo(loss=InfoNCE(0.2), queue_size=32, key_bn="none", **SMALL)
    assert model.hparams["channels_last"] == "auto" and not _is_nhwc(model)  # nothing decided before setup
    tiny_trainer(tmp_path, max_steps=2).fit(model, datamodule=tiny_data())
    assert model.memory_format is torch.channels_last and _is_nhwc(model)
    assert model.key_backbone[0].weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("channels_last", "device", "nhwc"),
    [
        ("auto", "cpu", True),
        ("auto", "cuda", True),
        ("auto", "mps", False),
        (False, "cpu", False),
        (False, "cuda", False),
        (True, "cuda", True),
        (True, "mps", True),
    ],
)
def test_the_layout_follows_the_option_and_for_auto_the_trainer_s_device(channels_last, device, nhwc):
    """Catches ``auto`` deciding from the parameters' device (still the CPU when a GPU run calls
    ``setup``) instead of the Trainer's, ``auto`` leaving a GPU in NCHW (2.4× slower for ResNet-18's
    SimCLR step on an H200), NHWC forced on a device where it was never measured, and an explicit
    choice overridden by the device."""
    model = SimCLR(loss=InfoNCE(0.5), channels_last=channels_last, **SMALL)
    model._trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))
    model.setup("validate")
    assert _is_nhwc(model) is nhwc
    assert (model.memory_format is torch.channels_last) is nhwc


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_bad_channels_last_value_is_one_config_error(value):
    with pytest.raises(ConfigError, match=r"model\.channels_last must be true, false or auto"):
        SimCLR(loss=InfoNCE(0.5), channels_last=value, **SMALL)


def test_compile_compiles_every_encoder_pass_with_the_same_loss(monkeypatch):
    """Catches compiled code that renames parameters (checkpoints would not load), a MoCo key encoder
    left eager, or compiled code computing another loss. Dynamo traces for real; the ``aot_eager``
    backend skips inductor's C++ build (benchmarks/train_step.py measures the real one)."""
    compile_cheaply(monkeypatch)
    torch.manual_seed(0)
    plain = MoCo(loss=InfoNCE(0.2), queue_size=32, key_bn="none", **SMALL).train()
    compiled = copy.deepcopy(plain)
    compiled.compile_backbone = True
    compiled.setup("fit")
    assert compiled.state_dict().keys() == plain.state_dict().keys()
    loss_a, grads_a = _loss_and_grads(plain)
    loss_b, grads_b = _loss_and_grads(compiled)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-4, atol=1e-5)
    assert grads_b.keys() == grads_a.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-5)
    assert dynamo_compiles() == 2  # the query encoder (with gradients) and the key encoder (without)


class Graphs:
    """A dynamo backend that keeps every graph it is given (and runs it as traced)."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> Any:
        self.graphs.append(graph)
        return graph.forward

    def calls(self, graph: torch.fx.GraphModule) -> list[Any]:
        return [node.target for node in graph.graph.nodes if node.op == "call_function"]


def test_compile_puts_the_projection_head_and_the_normalisation_in_the_encoder_s_graph(monkeypatch):
    """``compile: true`` compiles the whole encoder pass (backbone → head → normalize) as one graph,
    so the head's layers fuse with the rest instead of running as separate eager kernels. Catches a
    compile of the backbone alone (the head and the normalisation left outside every graph) and a
    graph break inside the pass."""
    graphs = Graphs()
    compile_cheaply(monkeypatch, graphs)
    model = SimCLR(loss=InfoNCE(0.5), compile=True, **SMALL).train()
    model.setup("fit")
    model.loss(model.contrast(_batch())).value.backward()
    assert len(graphs.graphs) == 1 and not torch._dynamo.utils.counters["graph_break"]
    calls = graphs.calls(graphs.graphs[0])
    assert torch.nn.functional.normalize in calls
    assert calls.count(torch._C._nn.linear) == 2  # the MLP head's two layers (small_cnn has no linear layer)


class CompileCounts(L.Callback):
    """Frames dynamo compiled so far, after every training step (``steps``) and at the end of every
    evaluation (``evaluations``)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.evaluations: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append(dynamo_compiles())

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.evaluations.append(dynamo_compiles())


@pytest.mark.parametrize(
    ("method", "options", "graphs"),
    [
        (SimCLR, {}, 1),
        (MoCo, {"queue_size": 16, "key_bn": "split", "split_bn_groups": 2}, 2),  # query (gradients) + key (none)
        (MemoryBank, {}, 1),
    ],
    ids=["simclr", "moco", "memory_bank"],
)
def test_a_compiled_fit_compiles_at_its_first_step_and_never_again(method, options, graphs, monkeypatch, tmp_path):
    """Three epochs with an evaluation (validation loop and kNN pass) after each: every graph is
    compiled in the first training step, and no later step, epoch start or evaluation compiles or
    recompiles one (issue 38: a compiled epoch was slower than an eager one). Catches a guard that
    fails at an epoch boundary or after an evaluation (a Python number in the graph that changes,
    eval mode or no-grad leaking back into training, the stance switch of the eager evaluation), a
    last, smaller training batch (drop_last), and evaluation passes going through compiled code."""
    from callbacks import KNNMonitor

    compile_cheaply(monkeypatch)
    torch.manual_seed(0)
    model = method(loss=InfoNCE(0.5), compile=True, **SMALL, **options)
    counts = CompileCounts()
    trainer = tiny_trainer(
        tmp_path, max_epochs=3, limit_train_batches=None, limit_val_batches=None, callbacks=[counts, KNNMonitor(k=3)]
    )
    trainer.fit(model, datamodule=tiny_data(train_size=44))  # 5 full batches of 8 and 4 images left over
    assert trainer.state.finished and len(counts.steps) == 15 and len(counts.evaluations) == 3
    assert counts.steps == [graphs] * 15
    assert counts.evaluations == [graphs] * 3
    assert not torch._dynamo.utils.counters["graph_break"]


class CompiledCalls(L.Callback):
    """Records, at every training step, whether the model's encoder passes are compiled and whether the
    step's loss was finite."""

    def __init__(self) -> None:
        self.compiled: list[bool] = []
        self.finite: list[bool] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.compiled.append(pl_module._encoder is not encode_with)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.finite.append(bool(torch.isfinite(loss)))


@pytest.mark.slow
def test_two_compiled_fits_in_one_process_both_compile_and_train(tmp_path):
    """``compile: true`` twice in one process (issue 38: a sweep's or a notebook's second run), with
    inductor for real (a C++ build on the CPU) and forked DataLoader workers started after the first
    compile. Catches a compile flag kept beyond its model (the second model left uncompiled),
    compiled state of the first fit that breaks the second (its parameters are another model's: the
    compiled code must not keep the first's), and workers that cannot start after a compile."""
    for run in range(2):
        torch.manual_seed(run)
        model = SimCLR(loss=InfoNCE(0.5), compile=True, **SMALL)
        calls = CompiledCalls()
        trainer = tiny_trainer(tmp_path / str(run), max_steps=3, callbacks=[calls])
        trainer.fit(model, datamodule=tiny_data(num_workers=2))
        assert trainer.state.finished and trainer.global_step == 3
        assert calls.compiled == [True] * 3 and all(calls.finite)
        model.eval()
        images = torch.randn(4, 3, 8, 8)
        with torch.no_grad():  # the compiled encoder computes what the model's own weights give
            compiled = model.encode(images)
            eager = encode_with(model.backbone, model.projection_head, model.to_memory_format(images))
        for a, b in zip(compiled, eager):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
