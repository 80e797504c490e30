"""``python -m ssl_app export --ckpt RUN/checkpoints/last.ckpt --out encoder.pt``: the trained backbone, alone.

A training checkpoint holds the whole method (backbone, projection head, loss state, optimiser,
loops) and needs ssl_app to be read. The exported file holds only what a user of the encoder
needs, as plain tensors and plain Python values (``torch.load(..., weights_only=True)`` reads it):

- ``state_dict``: the backbone's weights, keys as the backbone names them. For the torchvision
  ResNets (``resnet18_cifar``, ``resnet18``, ``resnet50``) these are torchvision's own names, so
  they load with ``strict=True`` into ``torchvision.models.resnet18()`` / ``resnet50()`` whose
  ``fc`` (and, for the CIFAR stem, ``conv1`` and ``maxpool``) are replaced as the README shows.
- ``meta``: what it takes to build and feed it (backbone name and norm, feature width, the
  input size and normalisation the run's data used, the checkpoint, method, step and ssl_app version).
- ``projection_head`` (``--with-head``): the projection head's weights; ``meta["head"]`` holds the
  arguments of ``ssl_app.models.build_projection_head`` that rebuild it.
- ``loss_state_dict``: the loss's own state (a learnable τ's ``temperature.log_scale`` = log(1/τ),
  PaCo's class centres; empty for most losses), and ``meta["loss"]``, the loss's config (class
  path and options) and ``meta["temperature"]``, the τ the run ended with when it was learned
  (``clamp(exp(−log_scale), min, max)``, ``ssl_app.temperature.Learnable``; else ``None``: a fixed or
  scheduled τ is in ``meta["loss"]``).

``--format torch_export`` writes a ``torch.export`` program instead (``torch.export.load(path).module()``,
neither ssl_app nor torchvision needed; TorchScript is deprecated): images of the run's crop size,
any batch size → features, or with ``--with-head`` ``(features, L2-normalised projections)``; the
meta data is its extra file ``meta.json``.

:func:`load_encoder` is also what ``python -m ssl_app embed`` reads a checkpoint with.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssl_app import __version__
from ssl_app.checkpointing import output_error
from ssl_app.cli.endings import say_error
from ssl_app.cli.tool_options import export_parser as parser
from ssl_app.cli.tool_options import parse_or_exit
from ssl_app.errors import ConfigError, OutputError
from ssl_app.io.atomic import atomic_file
from ssl_app.normalisation import input_of
from ssl_app.resume import checkpoint_config, checkpoint_data, checkpoint_method, load_checkpoint
from ssl_app.runs.spec import LossSpec
from ssl_app.trust import import_trusted

#: The value of ``format`` in an exported file (``format_version`` counts incompatible changes).
FILE_FORMAT = "ssl_app.encoder"
FORMAT_VERSION = 1
#: Backbones that are a torchvision ResNet: ``(torchvision constructor, CIFAR stem)``.
TORCHVISION_RESNETS = {"resnet18_cifar": ("resnet18", True), "resnet18": ("resnet18", False), "resnet50": ("resnet50", False)}
BACKBONE_PREFIX = "backbone."
HEAD_PREFIX = "projection_head."
LOSS_PREFIX = "loss."


@dataclass
class TrainedEncoder:
    """A checkpoint's backbone and projection head (eval mode, on the CPU), and what describes them.

    ``meta``: plain data (the exported file's ``meta``); ``config``: the run's resolved config
    (None when the checkpoint does not record it); ``head`` None when the checkpoint has none.
    """

    backbone: nn.Module
    head: Optional[nn.Module]
    meta: dict[str, Any]
    config: Optional[dict[str, Any]] = field(default=None, repr=False)
    loss_state: dict[str, Tensor] = field(default_factory=dict, repr=False)


def load_encoder(path: str, option: str = "--ckpt") -> TrainedEncoder:
    """The backbone (and projection head) of a checkpoint written by ``python -m ssl_app fit``.

    Built from the checkpoint's hyper-parameters with ``ssl_app.models`` (so any method's
    checkpoint works, and neither its loss nor its optimiser is built) and loaded strictly; every
    way the file is not such a checkpoint is a ConfigError naming ``option`` and the file.
    """
    from ssl_app.models import build_backbone, build_projection_head

    checkpoint = load_checkpoint(path, option=option)
    hparams = checkpoint.get("hyper_parameters") or {}
    method = checkpoint_method(checkpoint)
    if not isinstance((hparams if isinstance(hparams, dict) else {}).get("backbone"), str):
        probed = hparams.get("checkpoint") if isinstance(hparams, dict) else None
        if isinstance(probed, str):
            raise ConfigError(
                f"{option}: {path} is a linear probe's checkpoint ({method}); export the encoder it probes: {probed}"
            )
        raise ConfigError(
            f"{option}: {path} is not an ssl_app checkpoint of a contrastive method (its hyper-parameters name no backbone)"
        )
    options = {**_method_defaults(), **{key: value for key, value in hparams.items() if not key.startswith("_")}}
    name, norm = options["backbone"], options["backbone_norm"]
    try:
        backbone, feature_dim = build_backbone(name, norm)
    except ConfigError as error:
        raise ConfigError(f"{option}: {path}: {error}") from None
    state = checkpoint["state_dict"]
    _load_part(backbone, state, BACKBONE_PREFIX, f"{option}: {path}", f"backbone {name!r}")
    head_args = {
        "input_dim": feature_dim,
        "hidden_dim": options["proj_hidden_dim"],
        "output_dim": options["proj_dim"],
        "num_layers": options["proj_layers"],
        "batch_norm": options["proj_batch_norm"],
    }
    head: Optional[nn.Module] = None
    if any(key.startswith(HEAD_PREFIX) for key in state):
        head = build_projection_head(**head_args)
        _load_part(head, state, HEAD_PREFIX, f"{option}: {path}", "projection head")
        head.eval()
    backbone.eval()
    config = checkpoint_config(checkpoint, path)
    torchvision = TORCHVISION_RESNETS.get(name)
    meta = {
        "ssl_app_version": __version__,
        "backbone": name,
        "backbone_norm": norm,
        "feature_dim": feature_dim,
        "torchvision": torchvision[0] if torchvision else None,
        "cifar_stem": torchvision[1] if torchvision else None,
        "input": input_of(config, checkpoint_data(checkpoint, path)),
        "method": method,
        "checkpoint": str(path),
        "epoch": checkpoint.get("epoch"),
        "global_step": checkpoint.get("global_step"),
        "head": head_args if head is not None else None,
    }
    loss_state = {key[len(LOSS_PREFIX) :]: value for key, value in state.items() if key.startswith(LOSS_PREFIX)}
    loss_config = ((config or {}).get("model") or {}).get("init_args", {}).get("loss")
    meta["loss"] = loss_config if isinstance(loss_config, dict) else None
    meta["temperature"] = learned_temperature(loss_state, loss_config)
    return TrainedEncoder(backbone, head, meta, config, loss_state)


def learned_temperature(loss_state: dict[str, Any], loss_config: Any) -> Optional[float]:
    """The τ a learnable temperature ended with, ``clamp(exp(−log_scale), min, max)`` (None: not learned)."""
    log_scale = loss_state.get("temperature.log_scale")
    if not isinstance(log_scale, Tensor):
        return None
    from ssl_app.temperature import Learnable

    loss = LossSpec.from_config(loss_config)
    policy = loss.temperature if loss is not None else None
    options = policy.values if policy is not None and policy.policy_class is Learnable else Learnable.defaults()
    return float(min(max(float(torch.exp(-log_scale.double())), float(options["min"])), float(options["max"])))


def _method_defaults() -> dict[str, Any]:
    """The constructor defaults of ``ContrastiveMethod`` (for a checkpoint whose hyper-parameters leave one out)."""
    from ssl_app.methods import ContrastiveMethod

    parameters = inspect.signature(ContrastiveMethod.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty and p.name != "loss"}


def _load_part(module: nn.Module, state: dict[str, Any], prefix: str, where: str, what: str) -> None:
    """Load the ``prefix``-ed entries of ``state`` into ``module`` strictly, or say in one line why not."""
    part = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
    if not part:
        raise ConfigError(f"{where} holds no {what} (no {prefix}* weights)")
    try:
        module.load_state_dict(part, strict=True)
    except RuntimeError as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"{where}: its {prefix}* weights do not fit the {what} ({reason[:300]})") from None


def exported(encoder: TrainedEncoder, with_head: bool = False) -> dict[str, Any]:
    """The ``state_dict`` format's content: plain tensors (contiguous, on the CPU) and plain values."""
    if with_head and encoder.head is None:
        raise ConfigError(f"--with-head: {encoder.meta['checkpoint']} has no projection head")
    meta = dict(encoder.meta, head=encoder.meta["head"] if with_head else None)
    content: dict[str, Any] = {
        "format": FILE_FORMAT,
        "format_version": FORMAT_VERSION,
        "meta": meta,
        "state_dict": _plain_state(encoder.backbone),
        "loss_state_dict": {key: value.detach().cpu().contiguous() for key, value in encoder.loss_state.items()},
    }
    if with_head:
        assert encoder.head is not None
        content["projection_head"] = _plain_state(encoder.head)
    return content


def _plain_state(module: nn.Module) -> dict[str, Tensor]:
    return {key: value.detach().cpu().contiguous() for key, value in module.state_dict().items()}


class _EncoderWithHead(nn.Module):
    """The ``torch_export`` form with a head: images → ``(features, L2-normalised projections)``."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        features = self.backbone(images)
        return features, F.normalize(self.head(features), dim=1)


def exported_program(encoder: TrainedEncoder, with_head: bool = False) -> torch.export.ExportedProgram:
    """The backbone (with ``with_head``: and the head) as a ``torch.export`` program in eval mode.

    The batch size is free; the image size is fixed at the run's crop size (``meta["input"]``, 32
    when the checkpoint does not record it), as ``torch.export`` needs one to trace with.
    """
    if with_head and encoder.head is None:
        raise ConfigError(f"--with-head: {encoder.meta['checkpoint']} has no projection head")
    module = _EncoderWithHead(encoder.backbone, encoder.head) if with_head else encoder.backbone
    size = int((encoder.meta.get("input") or {}).get("crop_size") or 32)
    batch = torch.export.Dim("batch", min=1)
    example = torch.zeros(2, 3, size, size)
    with torch.no_grad():
        return torch.export.export(module.eval(), (example,), dynamic_shapes=({0: batch},))


def write_export(encoder: TrainedEncoder, out: Path, fmt: str = "state_dict", with_head: bool = False) -> None:
    """Write ``out`` atomically in ``fmt`` (``state_dict`` or ``torch_export``); an unwritable file is an OutputError."""
    if fmt == "torch_export":
        meta = dict(encoder.meta, head=encoder.meta["head"] if with_head else None)
        buffer = io.BytesIO()
        torch.export.save(exported_program(encoder, with_head), buffer, extra_files={"meta.json": json.dumps(meta)})
        payload = buffer.getvalue()
    else:
        buffer = io.BytesIO()
        torch.save(exported(encoder, with_head), buffer)
        payload = buffer.getvalue()
    try:
        with atomic_file(out) as file:
            file.write(payload)
    except OSError as error:
        cause = output_error(error)
        raise OutputError(f"cannot write {out}: {cause or error}") from error


def check_output(out: Path, overwrite: bool, option: str = "--out") -> None:
    """Refuse an ``out`` that exists (unless ``overwrite``) or is a folder, before any work."""
    if out.is_dir():
        raise ConfigError(f"{option}: {out} is a folder; name a file")
    if out.exists() and not overwrite:
        raise ConfigError(f"{option}: {out} exists; pass --overwrite to replace it")


def main(args: Sequence[str], out: Any = None, err: Any = None) -> int:
    """Run ``export``; return the exit status (0; 2 with one ``error:`` line for bad input; 1 when unwritable)."""
    return run_command(parser(), args, write_encoder, out, err)


def write_encoder(options: argparse.Namespace) -> list[str]:
    """Write the encoder ``options`` name; the line that says what was written."""
    target = Path(options.out)
    check_output(target, options.overwrite)
    import_trusted(options.imports)
    import ssl_app.evaluation  # noqa: F401 - a probe's checkpoint names its class, which is ours: known (ssl_app.trust)

    encoder = load_encoder(options.ckpt)
    write_export(encoder, target, options.format, options.with_head)
    meta = encoder.meta
    return [
        f"Wrote {target}: the {meta['backbone']} backbone ({meta['feature_dim']}-d features) of {options.ckpt} "
        f"(step {meta['global_step']}){' with its projection head' if options.with_head else ''}, as {options.format}"
    ]


def run_command(
    parser: argparse.ArgumentParser, args: Sequence[str], work: Callable[[argparse.Namespace], list[str]], out: Any, err: Any
) -> int:
    """Parse ``args`` and do ``work``; print its lines and return 0, or end as ``say_error`` says (one ``error:``
    line: 2 for bad input, 1 for a file that cannot be written). ``export`` and ``embed`` end this way."""
    options = parse_or_exit(parser, args, err)
    if isinstance(options, int):
        return options
    try:
        lines = work(options)
    except (ConfigError, OutputError) as error:
        return say_error(error, parser.prog.split()[-1], err)
    print("\n".join(lines), file=out)
    return 0
