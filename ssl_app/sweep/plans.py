"""Plans: named grids of whole experiments, one command per data set (``python -m ssl_app.sweep --plan table1 --data cifar10``).

A plan is a list of *columns* (each a loss overlay, ``configs/losses/<plan>/<column>.yaml``: ``table1``,
``beyond_softmax``) run on a
data set's *recipe* (its memory-bank config), each fit followed by the data set's linear evaluation.
:func:`plan_points` turns it into the sweep's points, so a plan runs, resumes, reports ``--status``
and goes to SLURM exactly as a hand-written ``--config``/``--grid`` sweep.

Two plans bring their own recipe and pass each column on the command line instead of an overlay: ``hardness``
(a loss per column) and ``tau_schedules`` (a τ per column, as the sweep's τ axis writes it, on long-tailed data).

``shapes`` is a CPU-scale stand-in of the same shape (the generated shapes, the CPU memory-bank
config): the tests run it end to end, and it checks a machine before a long plan.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ssl_app.runs.spec import DATA_ROOT_KEY, LOSS_KEY, PROBE_DATA_ROOT_KEY, TAU_KEY
from ssl_app.sweep.tau_axis import tau_value

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: Table 1 of Wang & Liu 2021, its columns in the paper's order: one loss overlay each.
TABLE1_COLUMNS = (
    "infonce_t0.07", "infonce_t0.3", "infonce_t0.7", "infonce_t1.0", "simple",
    "hard_t0.07", "hard_t0.3", "hard_t0.7", "hard_t1.0", "hard_simple",
)  # fmt: skip
PLANS = {"table1": ("losses/table1", TABLE1_COLUMNS)}  # the hardness plan adds itself below (no overlay folder)
#: Issue 41: the softmax family (InfoNCE at a small and a large τ, DCL) beside the losses without a softmax
#: temperature (docs/science.md, "Losses without a softmax temperature"), one overlay each in
#: configs/losses/beyond_softmax/, on the data set's memory-bank recipe as Table 1. The temperature-free
#: InfoNCE of Kim & Kim (arXiv 2501.17683) is not among them: its exact form could not be sourced.
BEYOND_SOFTMAX_COLUMNS = ("infonce_t0.2", "infonce_t0.5", "dcl", "spectral", "sigmoid")
PLANS["beyond_softmax"] = ("losses/beyond_softmax", BEYOND_SOFTMAX_COLUMNS)


@dataclass(frozen=True)
class DataSet:
    """A data set's recipe and linear evaluation (paths under configs/), its split sizes (for ``--estimate``),
    and where its files are: ``root`` (a folder the data is read from, ``--data-root``), ``downloads``
    (torchvision fetches it into that folder on first use)."""

    recipe: str
    linear: str
    train_images: int
    eval_images: int
    root: bool = True
    downloads: bool = True


DATA_SETS = {
    "cifar10": DataSet("cifar10/memory_bank.yaml", "cifar10/linear.yaml", 50_000, 10_000),
    "cifar100": DataSet("cifar100/memory_bank.yaml", "cifar100/linear.yaml", 50_000, 10_000),
    "svhn": DataSet("svhn/memory_bank.yaml", "svhn/linear.yaml", 73_257, 26_032),
    # CMC's ImageNet-100: about 1,300 training images per class (126,689 in all), 50 per class in val/.
    "imagenet100": DataSet("imagenet100/memory_bank.yaml", "imagenet100/linear.yaml", 126_689, 5_000, downloads=False),
    "shapes": DataSet("memory_bank.yaml", "linear.yaml", 2_000, 500, root=False, downloads=False),  # the CPU stand-in
    # The long-tailed splits at imbalance factor 100 (datamodules.long_tail: n_c = int(n_max · 100^(−c/(C−1)))), the
    # balanced test split held out; no memory-bank recipe (recipe ""): the tau_schedules plan brings its own.
    "cifar10_lt": DataSet("", "cifar10/linear_lt.yaml", 12_406, 10_000),
    "cifar100_lt": DataSet("", "cifar100/linear_lt.yaml", 10_847, 10_000),
}

#: Where each stage's config keeps the data's folder: the fit's data module, and the linear
#: evaluation's wrapped one (``LinearEvalDataModule(data=...)``).
FIT_ROOT = f"--{DATA_ROOT_KEY}"
LINEAR_ROOT = f"--{PROBE_DATA_ROOT_KEY}"


@dataclass(frozen=True)
class PlanPoint:
    """One column of a plan: its name (the run's folder), the overlay, and the arguments that add it."""

    name: str
    overlay: str

    @property
    def args(self) -> list[str]:
        return ["--config", self.overlay]

    @property
    def values(self) -> dict[str, str]:
        """What the point sets, for its ``sweep.json``."""
        return {"config": self.overlay}


def shown(path: Path) -> str:
    """``path`` relative to the current folder when it lies under it (shorter commands), else absolute."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else Path(relative).as_posix()


def plan_points(plan: str, data: str) -> tuple[DataSet, list[PlanPoint]]:
    """The data set and the plan's columns as sweep points (overlay paths checked to exist)."""
    if plan == "hardness":
        return hardness_plan(data)
    if plan == "tau_schedules":
        return tau_schedules_plan(data)
    if not DATA_SETS[data].recipe:
        with_recipe = ", ".join(name for name, data_set in DATA_SETS.items() if data_set.recipe)
        raise ValueError(f"--plan {plan} has a memory-bank recipe for {with_recipe} only, not {data}")
    folder, columns = PLANS[plan]
    points = [PlanPoint(column, shown(CONFIGS / folder / f"{column}.yaml")) for column in columns]
    missing = [p.overlay for p in points if not Path(p.overlay).is_file()]
    if missing:
        raise FileNotFoundError(f"plan {plan}: missing overlays {missing}")
    return DATA_SETS[data], points


def root_options(name: str, root: str, runs: bool = True) -> tuple[str, str]:
    """The fit's and the linear evaluation's option for the data folder ``root`` (``--data-root``), so one
    path reaches both stages; absolute, so a job started elsewhere (SLURM) reads the same folder.

    ``ValueError`` naming the problem: a data set that is generated (no folder), or, when the plan
    ``runs`` (not a dry run), a folder that does not exist for a data set that cannot be downloaded
    into it."""
    data = DATA_SETS[name]
    if not data.root:
        raise ValueError(f"--data-root: the {name} data are generated, not read from a folder")
    path = Path(root).expanduser().resolve()
    if runs and not data.downloads and not path.is_dir():
        raise ValueError(f"--data-root {root}: no such folder (the {name} data are read from it, not downloaded)")
    return f"{FIT_ROOT}={path.as_posix()}", f"{LINEAR_ROOT}={path.as_posix()}"


def recipe_paths(data: DataSet) -> tuple[str, str]:
    """The recipe and linear-evaluation config of ``data``, as shown in commands."""
    return shown(CONFIGS / data.recipe), shown(CONFIGS / data.linear)


# --- the hardness plan: the hardness-aware family on one SimCLR recipe (issue 32) ----------------------
#: Each column's loss, by class path and options, on one SimCLR ResNet-18 recipe with one schedule, so that
#: only the loss differs. No overlay files: the point passes the loss on the command line. A loss that
#: has a temperature and is given none here keeps the recipe's τ = 0.5 (jsonargparse carries it over);
#: every other option is the loss's default. A class that does not exist fails the sweep's pre-flight
#: (``--dry-run``, ``--estimate``), naming the point.
HARDNESS_LOSSES: dict[str, tuple[str, dict[str, float]]] = {
    "infonce_t0.2": ("InfoNCE", {"temperature": 0.2}),
    "infonce_t0.5": ("InfoNCE", {"temperature": 0.5}),
    "hard_q0.1": ("HardContrastive", {"temperature": 0.5, "quantile": 0.1}),  # the top 10% of each anchor's negatives
    "dcl": ("DCL", {}),
    "dclw": ("DCLW", {}),
    "debiased_tp0.1": ("Debiased", {"tau_plus": 0.1}),
    "hcl_b0.5": ("HCL", {"beta": 0.5}),
    "hcl_b1.0": ("HCL", {"beta": 1.0}),
    "hypersphere": ("Hypersphere", {}),
    "macl": ("MACL", {}),
}
#: The SimCLR recipe per data set: CIFAR-10, and the generated shapes as the CPU stand-in (the quickstart).
HARDNESS_RECIPES = {"cifar10": "cifar10/simclr.yaml", "shapes": "quickstart.yaml"}
PLANS["hardness"] = (None, tuple(HARDNESS_LOSSES))


@dataclass(frozen=True)
class LossPoint(PlanPoint):
    """A column given by its loss (``ssl_app.losses.<loss_class>`` and init args) instead of an overlay file."""

    overlay: str = ""  # none
    loss_class: str = "InfoNCE"
    options: tuple[tuple[str, float], ...] = ()

    @property
    def loss(self) -> dict:
        return {"class_path": f"ssl_app.losses.{self.loss_class}", "init_args": dict(self.options)}

    @property
    def args(self) -> list[str]:
        return [f"--{LOSS_KEY}={json.dumps(self.loss)}"]

    @property
    def values(self) -> dict[str, str]:
        return {LOSS_KEY: json.dumps(self.loss)}


def hardness_plan(data: str) -> tuple[DataSet, list[PlanPoint]]:
    """The data set with its SimCLR recipe in place of its memory-bank one, and a point per loss.
    ``ValueError`` naming the data sets it has a recipe for."""
    if data not in HARDNESS_RECIPES:
        raise ValueError(f"--plan hardness has a SimCLR recipe for {', '.join(sorted(HARDNESS_RECIPES))} only, not {data}")
    data_set = dataclasses.replace(DATA_SETS[data], recipe=HARDNESS_RECIPES[data])
    points = [LossPoint(name, loss_class=loss, options=tuple(opts.items())) for name, (loss, opts) in HARDNESS_LOSSES.items()]
    return data_set, points


# --- the tau_schedules plan: constant τ against Kukleva et al.'s cosine schedule (issue 31) -----------
#: Each column's τ as a sweep τ-axis value (``ssl_app.sweep.tau_axis``): the constants of Kukleva et al.'s
#: baselines and their cosine schedule between τ⁻ = 0.1 and τ⁺ = 1.0. The period: the authors' code
#: (Annusha/temperature_schedules, train_simCLR.py line 399) computes
#: ``tau = min_tau + 0.5 * (max_tau - min_tau) * (1 + cos(pi * epoch / t_max))`` with ``--t_max 200``
#: (README.md lines 60 and 84, their CIFAR-10-LT and CIFAR-100-LT commands), i.e. cos(2π e / 400): a period
#: of 400 epochs in ssl_app.temperature.Cosine's form. (Their epochs count from 1 and τ changes once per
#: epoch; here e counts from 0, fractionally within an epoch.)
TAU_SCHEDULE_COLUMNS = ("0.1", "0.2", "0.5", "1.0", "cosine:0.1-1.0:T=400")
#: The SimCLR recipe per long-tailed data set (configs/<data>/simclr.yaml).
TAU_SCHEDULE_RECIPES = {"cifar10_lt": "cifar10_lt/simclr.yaml", "cifar100_lt": "cifar100_lt/simclr.yaml"}
PLANS["tau_schedules"] = (None, TAU_SCHEDULE_COLUMNS)


@dataclass(frozen=True)
class TauPoint(PlanPoint):
    """A column given by its τ (a number or a policy's class-path config, as JSON) on the recipe's loss."""

    overlay: str = ""  # none
    tau: str = ""

    @property
    def args(self) -> list[str]:
        return [f"--{TAU_KEY}={self.tau}"]

    @property
    def values(self) -> dict[str, str]:
        return {TAU_KEY: self.tau}


def tau_schedules_plan(data: str) -> tuple[DataSet, list[PlanPoint]]:
    """The long-tailed data set with its SimCLR recipe, and a point per τ column, named ``tau_<value>``
    (``tau_0.1``, ``tau_cosine_0.1-1_T=400``). ``ValueError`` naming the data sets it has a recipe for."""
    if data not in TAU_SCHEDULE_RECIPES:
        raise ValueError(f"--plan tau_schedules has a recipe for {', '.join(sorted(TAU_SCHEDULE_RECIPES))} only, not {data}")
    data_set = dataclasses.replace(DATA_SETS[data], recipe=TAU_SCHEDULE_RECIPES[data])
    points: list[PlanPoint] = []
    for column in TAU_SCHEDULE_COLUMNS:
        value = tau_value(column, "--plan tau_schedules")
        points.append(TauPoint(f"tau_{value.name.replace(':', '_')}", tau=value.value))
    return data_set, points
