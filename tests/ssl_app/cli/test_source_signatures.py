"""Init options read from source (``ssl_app.cli.source_signatures``): the same as jsonargparse's for every class a
config can name, and None (left to the parser) wherever the source cannot settle them."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ssl_app import registry
from ssl_app.cli.source_signatures import init_parameters, method_parameters
from ssl_app.cli.suggest import parameters_of

KINDS = ("METHODS", "LOSSES", "TEMPERATURES", "DATAMODULES")
REGISTERED = [entry.value for kind in KINDS for entry in getattr(registry, kind).values()]
FIXED = [
    "lightning.pytorch.trainer.trainer.Trainer",
    "lightning.pytorch.Trainer",
    "lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint",
    "ssl_app.health.NumericalHealth",
    "ssl_app.evaluation.LinearProbe",
    "datamodules.LinearEvalDataModule",
    "lightning.pytorch.loggers.TensorBoardLogger",
    "lightning.pytorch.loggers.CSVLogger",
]


@pytest.mark.parametrize("class_path", REGISTERED + FIXED)
def test_every_class_a_config_names_has_jsonargparse_s_options(class_path):
    """Catches the early check refusing an option the parser takes (or missing one it refuses): a base's
    options lost through ``**kwargs`` or a class without ``__init__``, a registry decorator taken for a
    signature-changing one, an import chain not followed."""
    read = init_parameters(class_path)
    assert read is not None, f"{class_path}: not settled from its source"
    assert sorted(read) == sorted(parameters_of(class_path))


def test_a_logger_whose_kwargs_go_to_its_writer_takes_the_writer_s_options():
    """TensorBoardLogger hands ``**kwargs`` up to Fabric's logger, which keeps them (``self._kwargs``) for the
    SummaryWriter its ``experiment`` property makes (imported there under ``if _TENSORBOARD_AVAILABLE``):
    jsonargparse offers the writer's options less the ``log_dir`` that call gives itself, and so does this
    reading (``--trainer.logger.init_args.save_dirr`` is refused before Lightning is imported; issue 40)."""
    read = init_parameters("lightning.pytorch.loggers.TensorBoardLogger")
    assert read is not None and {"flush_secs", "save_dir"} <= set(read) and "log_dir" not in read


def test_trainer_fit_s_arguments_are_read_from_its_source():
    assert {"ckpt_path", "datamodule"} <= set(method_parameters("lightning.pytorch.Trainer", "fit") or ())


def test_what_the_source_cannot_settle_is_none(tmp_path, monkeypatch):
    """A class is followed through relative imports and bases, ``**kwargs`` through ``super().__init__``, a function
    of the module, ``kwargs.pop``, an attribute a property passes on (less the keywords each call gives itself);
    ``**kwargs`` given to what cannot be read (``dict``), kept and never passed on, a ``@dataclass``, an unknown
    base or module give None rather than a guess."""
    package = tmp_path / "made_up"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from .models import Child, Elsewhere, Handed, Kept, KeptUnused, Made, Popped, Unknown\n"
    )
    (package / "base.py").write_text(
        textwrap.dedent(
            """
            class Base:
                def __init__(self, width: int = 1, *args, depth: int = 2, **kwargs):
                    super().__init__(**kwargs)
            """
        )
    )
    (package / "models.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            from external_lib import Foreign
            from .base import Base

            class Child(Base):
                def __init__(self, rate: float = 0.1, **kwargs):
                    super().__init__(**kwargs)

            class Grandchild(Child):
                pass

            class Elsewhere(Base):
                def __init__(self, rate: float = 0.1, **kwargs):
                    self.writer = dict(**kwargs)

            def build(size: int = 1, colour: str = "red"):
                return size

            class Popped:
                def __init__(self, **kwargs):
                    self.size = kwargs.pop("size", 2)

            class Handed(Base):
                def __init__(self, **kwargs):
                    super().__init__(width=3, **kwargs)
                    self.made = build(colour="blue", **kwargs)

            class Kept:
                def __init__(self, **kwargs):
                    self._kwargs = kwargs

                @property
                def thing(self):
                    return build(size=1, **self._kwargs)

            class KeptUnused:
                def __init__(self, **kwargs):
                    self._kwargs = kwargs

            @dataclass
            class Made:
                size: int = 3

            class Unknown(Foreign):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert init_parameters("made_up.Child") == ("rate", "width", "depth")
    assert init_parameters("made_up.models.Grandchild") == ("rate", "width", "depth")
    assert init_parameters("made_up.Elsewhere") is None
    assert init_parameters("made_up.Popped") == ("size",)
    assert init_parameters("made_up.Handed") == ("depth", "size")  # width and colour given by the calls
    assert init_parameters("made_up.Kept") == ("colour",)
    assert init_parameters("made_up.KeptUnused") is None
    assert init_parameters("made_up.Made") is None
    assert init_parameters("made_up.Unknown") is None
    assert init_parameters("made_up.Missing") is None
    assert init_parameters("no_such_package.Thing") is None
    assert "made_up" not in sys.modules  # read, never imported
