"""The linear probe reads the backbone of a method trained with any registered loss.

A method's checkpoint holds its loss's state too (PaCo's class centres and prior, under
``loss.*``), but the method's hyper-parameters leave the loss out, so the probe rebuilds the method
with its default loss: the loss's state is none of the probe's business, every other weight must
load exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.evaluation.linear import load_method
from tests.generic import method_cases
from tests.helpers import tiny_data, tiny_trainer


def fitted_checkpoint(tmp_path: Path, loss_case) -> Path:
    """The first registered method with the loss, after 2 steps, saved as ``fit`` saves it
    (LightningCLI adds the method's ``_class_path``, which the probe reads)."""
    method = method_cases()[0]
    model = method.build(loss=loss_case.build())
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, tiny_data())
    path = tmp_path / "method.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    saved["hyper_parameters"]["_class_path"] = f"{method.target.__module__}.{method.target.__name__}"
    torch.save(saved, path)
    return path


def test_the_probe_loads_the_method_of_every_loss_and_its_weights_exactly(loss_first_case, tmp_path):
    """Catches a probe that cannot read the checkpoint of a loss with state of its own (PaCo's
    ``loss.classifier.*``: unexpected keys for the default loss the method is rebuilt with)."""
    path = fitted_checkpoint(tmp_path, loss_first_case)
    method = load_method(str(path))
    saved = torch.load(path, weights_only=True)["state_dict"]
    for key, value in method.state_dict().items():
        if not key.startswith("loss."):
            assert torch.equal(value, saved[key]), key


def test_weights_other_than_the_loss_s_must_still_match(loss_first_case, tmp_path):
    """Catches a probe that ignores every key it cannot place (a backbone weight missing from the
    file would leave the probe reading random features)."""
    path = fitted_checkpoint(tmp_path, loss_first_case)
    saved = torch.load(path, weights_only=False)
    dropped = next(key for key in saved["state_dict"] if key.startswith("backbone."))
    del saved["state_dict"][dropped]
    torch.save(saved, path)
    with pytest.raises(ConfigError, match=rf"LinearProbe: .* {dropped}"):
        load_method(str(path))
