"""Plans: named grids of whole experiments, one command per data set (``python -m ssl_app.sweep --plan table1 --data cifar10``).

A plan is a list of *columns* (each a loss overlay, ``configs/losses/table1/<column>.yaml``) run on a
data set's *recipe* (its memory-bank config), each fit followed by the data set's linear evaluation.
:func:`plan_points` turns it into the sweep's points, so a plan runs, resumes, reports ``--status``
and goes to SLURM exactly as a hand-written ``--config``/``--grid`` sweep.

``shapes`` is a CPU-scale stand-in of the same shape (the generated shapes, the CPU memory-bank
config): the tests run it end to end, and it checks a machine before a long plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: Table 1 of Wang & Liu 2021, its columns in the paper's order: one loss overlay each.
TABLE1_COLUMNS = (
    "infonce_t0.07", "infonce_t0.3", "infonce_t0.7", "infonce_t1.0", "simple",
    "hard_t0.07", "hard_t0.3", "hard_t0.7", "hard_t1.0", "hard_simple",
)  # fmt: skip
PLANS = {"table1": ("losses/table1", TABLE1_COLUMNS)}


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
}

#: Where each stage's config keeps the data's folder: the fit's data module, and the linear
#: evaluation's wrapped one (``LinearEvalDataModule(data=...)``).
FIT_ROOT = "--data.init_args.root"
LINEAR_ROOT = "--data.init_args.data.init_args.root"


@dataclass(frozen=True)
class PlanPoint:
    """One column of a plan: its name (the run's folder), the overlay, and the arguments that add it."""

    name: str
    overlay: str

    @property
    def args(self) -> list[str]:
        return ["--config", self.overlay]


def shown(path: Path) -> str:
    """``path`` relative to the current folder when it lies under it (shorter commands), else absolute."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else Path(relative).as_posix()


def plan_points(plan: str, data: str) -> tuple[DataSet, list[PlanPoint]]:
    """The data set and the plan's columns as sweep points (overlay paths checked to exist)."""
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
