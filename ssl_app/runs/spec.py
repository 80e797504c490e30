"""A run described once: the frozen, typed :class:`RunSpec` of a resolved config, and the config's key paths.

A LightningCLI config is a nested dict (``model.init_args.loss.init_args.temperature``); this module is the one
that reads it by those paths (and names them, for the code that writes overrides: ``TAU_KEY``, ``LOSS_KEY``, …).
Everything else reads the spec: the report (its rows, labels and reference), the sweep (its τ axis, its
loss columns, ``--estimate``), the HParams panel, a run's identity (what a resume may not change) and the
console summary (which callbacks evaluated what)::

    spec = RunSpec.from_config(record.config)  # a run folder's config (run.json, config.yaml), or the live one
    spec.method_name, spec.loss.label(), spec.loss.temperature.label(), spec.batch_size, spec.seed

A spec is built from a config that may come from another version or a hand edit: a value of the wrong type
is left out (``None``), never an error, and no class path is imported. A loss and a τ policy each have one
canonical label that parses back (``LossSpec.parse(spec.label()) == spec``; the τ's is
``ssl_app.temperature.spelling``): ``InfoNCE τ=0.5``, ``HardContrastive τ=cosine:0.1-1:T=200 K=4095``. It is
the spelling a user types in a sweep's grid (``--grid tau=cosine:0.1-1:T=200``) and the report shows.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ssl_app.temperature.labels import PolicySpec
from ssl_app.temperature.spelling import exact

# --- the key paths (the config dialect): read here, written by the sweep and the CLI's hints -----------------
METHOD_KEY = "model.class_path"
BACKBONE_KEY = "model.init_args.backbone"
LOSS_KEY = "model.init_args.loss"
LOSS_CLASS_KEY = "model.init_args.loss.class_path"
LOSS_OPTIONS = "model.init_args.loss.init_args."
TAU_KEY = "model.init_args.loss.init_args.temperature"
LR_KEY = "model.init_args.optim.lr"
#: Where the learning rate was before ``optim`` grouped the optimiser's options.
OLD_LR_KEY = "model.init_args.lr"
ENCODER_CHECKPOINT_KEY = "model.init_args.checkpoint"
DATA_KEY = "data"
DATA_CLASS_KEY = "data.class_path"
DATA_OPTIONS = "data.init_args."
BATCH_KEY = "data.init_args.batch_size"
CROP_KEY = "data.init_args.augmentation.crop_size"
DATA_ROOT_KEY = "data.init_args.root"
#: A linear probe's data: the datamodule it wraps (``LinearEvalDataModule(data=...)``).
PROBE_DATA_ROOT_KEY = "data.init_args.data.init_args.root"
EPOCHS_KEY = "trainer.max_epochs"
STEPS_KEY = "trainer.max_steps"
VAL_EVERY_KEY = "trainer.check_val_every_n_epoch"
CALLBACKS_KEY = "trainer.callbacks"
LOGGER_KEYS = ("trainer.logger.init_args.save_dir", "trainer.logger.init_args.name", "trainer.logger.init_args.version")
SEED_KEY = "seed_everything"
#: Keys that say where a run writes or what it resumed from: never part of what a run *is*.
WHERE_KEYS = ("ckpt_path", "resume_anyway", "attach_to_run", "trainer.logger", "trainer.default_root_dir", "checkpoint.dirpath")
#: Datamodule options that change how data is loaded, not which data (they may change on resume).
LOADING_KEYS = ("num_workers", "pin_memory", "augment_on", "eval_on", "eval_batch_size", "cuda_graph_views", "download")
#: The keys that identify an experiment (with the data's, less ``LOADING_KEYS``): a resume may not change them.
IDENTITY_KEYS = (METHOD_KEY, BACKBONE_KEY, LOSS_KEY)
#: The loss options a label names by a symbol (the paper's τ, K, λ; q for a hard loss's quantile).
SYMBOLS = {"temperature": "τ", "num_negatives": "K", "quantile": "q", "lam": "λ"}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"a.b.c": value}``; lists become JSON text (hashable, comparable)."""
    if isinstance(tree, Mapping):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    if isinstance(tree, list):
        return {prefix[:-1]: json.dumps(tree, sort_keys=True, default=str)}
    return {prefix[:-1]: tree}


def under(key: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``key`` is one of ``prefixes`` or inside one."""
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def without_where(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The flat config less the keys that only say where a run writes (``WHERE_KEYS``)."""
    return {key: value for key, value in flat.items() if not under(key, WHERE_KEYS)}


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None


def _integer(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def class_name(class_path: Optional[str]) -> Optional[str]:
    """The last part of a class path (``ssl_app.methods.MoCo`` → ``MoCo``)."""
    return class_path.rsplit(".", 1)[-1] if class_path else None


# --- a loss --------------------------------------------------------------------------------------------------
def _spelled(value: Any) -> str:
    """An option's value in a loss label: a number exactly, text as it is, anything else as compact JSON."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return exact(value)
    if isinstance(value, str) and value and not re.search(r"[\s=]", value) and _read_value(value) == value:
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _read_value(text: str) -> Any:
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class LossSpec:
    """A loss as data: its ``class_path`` (this package's by its public path), its constructor ``options`` less the
    temperature (flat keys, defaults filled in for a registered loss) and its ``temperature`` (a policy, or None)."""

    class_path: str
    options: tuple[tuple[str, Any], ...] = ()
    temperature: Optional[PolicySpec] = None

    @property
    def name(self) -> str:
        return class_name(self.class_path) or self.class_path

    def option(self, key: str) -> Any:
        """An option's value (``temperature``: the τ's label), or None."""
        if key == "temperature":
            return None if self.temperature is None else self.temperature.label()
        return dict(self.options).get(key)

    def label(self) -> str:
        """The canonical label: the class's name (its path, when it is not a registered loss), ``τ=`` its τ's
        label, then each option that differs from the class's default, ``K``, ``q``, ``λ`` by their symbols:
        ``HardContrastive τ=0.3 K=4095``."""
        loss_class = _registered_loss(self.name)
        head = self.name if loss_class is not None and _public_path(loss_class) == self.class_path else self.class_path
        parts = [head]
        if self.temperature is not None:
            parts.append(f"τ={self.temperature.label()}")
        defaults = _defaults(loss_class) if loss_class is not None else {}
        for key, value in self.options:
            if key not in defaults or defaults[key] != value:
                parts.append(f"{SYMBOLS.get(key, key)}={_spelled(value)}")
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> LossSpec:
        """The spec a label spells (:meth:`label`); a ValueError naming the part that is not one."""
        head, *parts = text.split()
        loss_class = _registered_loss(head)
        class_path = _public_path(loss_class) if loss_class is not None else head
        names = {symbol: key for key, symbol in SYMBOLS.items()}
        init_args: dict[str, Any] = {}
        for part in parts:
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise ValueError(f"{text!r}: {part!r} is not KEY=VALUE")
            key = names.get(key, key)
            init_args[key] = PolicySpec.parse(value).config() if key == "temperature" else _read_value(value)
        return cls.from_config({"class_path": class_path, "init_args": init_args})

    def config(self) -> dict[str, Any]:
        """The loss as a config's ``model.init_args.loss`` holds it (``{class_path, init_args}``)."""
        init_args: dict[str, Any] = {}
        if self.temperature is not None:
            init_args["temperature"] = self.temperature.config()
        init_args.update(self.options)
        return {"class_path": self.class_path, "init_args": init_args}

    @classmethod
    def from_config(cls, value: Any) -> Optional[LossSpec]:
        """The spec of a config's ``loss`` (``{class_path, init_args}``), or None when it names no class."""
        if not isinstance(value, Mapping) or _text(value.get("class_path")) is None:
            return None
        class_path = value["class_path"]
        init_args = value.get("init_args")
        init_args = dict(init_args) if isinstance(init_args, Mapping) else {}
        temperature = PolicySpec.from_config(init_args.pop("temperature", None))
        loss_class = _registered_loss(class_name(class_path))
        if loss_class is not None and class_path in (_public_path(loss_class), f"{loss_class.__module__}.{loss_class.__name__}"):
            class_path = _public_path(loss_class)
            defaults = {key: default for key, default in _defaults(loss_class).items() if key != "temperature"}
            init_args = {**defaults, **init_args}
        options = tuple(sorted((key, _hashable(item)) for key, item in init_args.items()))
        return cls(class_path, options, temperature)


def _registered_loss(name: Optional[str]) -> Optional[type]:
    from ssl_app.losses.registry import LOSSES

    entry = LOSSES.get(name) if name else None
    return None if entry is None else entry.target


def _public_path(loss_class: type) -> str:
    from ssl_app.losses.registry import LOSSES

    return LOSSES.public_path(loss_class)


def _defaults(loss_class: type) -> dict[str, Any]:
    import inspect

    parameters = inspect.signature(loss_class).parameters.values()
    return {p.name: _hashable(p.default) for p in parameters if p.default is not p.empty and p.kind is p.POSITIONAL_OR_KEYWORD}


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (list, dict)) else value


# --- a run ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    """What a run is, read from its resolved config (module docstring). ``settings``: the flat config less the
    keys that say where it writes (``WHERE_KEYS``); ``callbacks``: ``(class name, init_args as JSON)`` of each
    callback, what was evaluated."""

    method: Optional[str] = None
    loss: Optional[LossSpec] = None
    backbone: Optional[str] = None
    data: Optional[str] = None
    batch_size: Optional[int] = None
    crop_size: Optional[int] = None
    lr: Optional[float] = None
    epochs: Optional[int] = None
    max_steps: Optional[int] = None
    val_every: Optional[int] = None
    seed: Optional[int] = None
    encoder_checkpoint: Optional[str] = None
    #: The data the encoder was fed (a probe's: the datamodule it wraps) and its ``augmentation`` options, as JSON.
    fed_data: Optional[str] = None
    fed_augmentation: Optional[str] = None
    callbacks: tuple[tuple[str, str], ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def method_name(self) -> Optional[str]:
        return class_name(self.method)

    @property
    def data_name(self) -> Optional[str]:
        return class_name(self.data)

    @property
    def flat(self) -> dict[str, Any]:
        """The settings as a dict (flat keys)."""
        return dict(self.settings)

    def data_option(self, key: str) -> Any:
        """A datamodule option (``class_list``; nested ones by their dotted path, ``augmentation.crop_size``)."""
        return self.flat.get(DATA_OPTIONS + key)

    def data_option_key(self, name: str) -> tuple[str, Any]:
        """The run's own key for the datamodule option ``name`` and its value (``None`` when unset), for a hint that
        names it: ``data.init_args.<name>``, or the shortest data key that ends in it (a linear probe's data nests
        its encoder's: ``data.init_args.data.init_args.num_workers``)."""
        flat = self.flat
        keys = sorted((key for key in flat if under(key, (DATA_KEY,)) and key.endswith("." + name)), key=len)
        return (keys[0], flat[keys[0]]) if keys else (DATA_OPTIONS + name, None)

    @property
    def augmentation(self) -> Optional[dict[str, Any]]:
        """The augmentation options of the data the encoder was fed (``fed_data``), or None."""
        return None if self.fed_augmentation is None else json.loads(self.fed_augmentation)

    def callback(self, name: str) -> Optional[dict[str, Any]]:
        """The ``init_args`` of the callback class ``name`` (``{}`` when it has none), None when the run had none."""
        found = next((args for callback, args in self.callbacks if callback == name), None)
        return None if found is None else json.loads(found)

    def identity(self) -> dict[str, Any]:
        """The flat keys that identify the experiment: method, backbone, loss and the data less how it is loaded."""
        return {
            key: value
            for key, value in self.settings
            if under(key, IDENTITY_KEYS)
            or (under(key, (DATA_KEY,)) and not any(key.endswith("." + name) for name in LOADING_KEYS))
        }

    @classmethod
    def from_config(cls, config: Any) -> RunSpec:
        """The spec of a resolved config (a nested dict: a run folder's ``config.yaml``, the record's, or the live one)."""
        config = config if isinstance(config, Mapping) else {}
        flat = flatten(config)
        model_args = _init_args(config.get("model"))
        fed = config.get("data")
        if isinstance(_init_args(fed).get("data"), Mapping) and "augmentation" not in _init_args(fed):
            fed = _init_args(fed)["data"]  # a linear probe's run: the data it wraps (LinearEvalDataModule.data)
        augmentation = _init_args(fed).get("augmentation")
        return cls(
            method=_text(flat.get(METHOD_KEY)),
            loss=LossSpec.from_config(model_args.get("loss")),
            backbone=_text(flat.get(BACKBONE_KEY)),
            data=_text(flat.get(DATA_CLASS_KEY)),
            batch_size=_integer(flat.get(BATCH_KEY)),
            crop_size=_integer(flat.get(CROP_KEY)),
            lr=_number(flat.get(LR_KEY, flat.get(OLD_LR_KEY))),
            epochs=_integer(flat.get(EPOCHS_KEY)),
            max_steps=_integer(flat.get(STEPS_KEY)),
            val_every=_integer(flat.get(VAL_EVERY_KEY)),
            seed=_integer(flat.get(SEED_KEY)),
            encoder_checkpoint=_text(flat.get(ENCODER_CHECKPOINT_KEY)),
            fed_data=_text(fed.get("class_path")) if isinstance(fed, Mapping) else None,
            fed_augmentation=json.dumps(augmentation, default=str) if isinstance(augmentation, Mapping) else None,
            callbacks=_callbacks(config),
            settings=tuple(without_where(flat).items()),
        )

    @classmethod
    def from_grid(cls, grid: Mapping[str, str]) -> RunSpec:
        """The spec of a sweep point's grid (flat keys, each value as typed on the command line: ``0.3``, JSON)."""
        nested: dict[str, Any] = {}
        for key, text in grid.items():
            try:
                value = json.loads(text) if isinstance(text, str) else text
            except ValueError:
                value = text
            *parents, last = key.split(".")
            node = nested
            for part in parents:
                node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
            node[last] = value
        return cls.from_config(nested)


def _init_args(section: Any) -> Mapping[str, Any]:
    """A config section's ``init_args`` (``{}`` when it has none)."""
    init_args = section.get("init_args") if isinstance(section, Mapping) else None
    return init_args if isinstance(init_args, Mapping) else {}


def _callbacks(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    trainer = config.get("trainer") if isinstance(config.get("trainer"), Mapping) else {}
    listed = trainer.get("callbacks") or []
    listed = [listed] if isinstance(listed, Mapping) else listed if isinstance(listed, list) else []
    found = []
    for callback in listed:
        if isinstance(callback, Mapping) and _text(callback.get("class_path")) is not None:
            args = callback.get("init_args")
            found.append((class_name(callback["class_path"]), json.dumps(args if isinstance(args, Mapping) else {}, default=str)))
    return tuple(found)
