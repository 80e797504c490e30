"""A small fake sweep shared by the report tests (written once per module)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssl_app.losses import InfoNCE, MaskedSimilarities
from tests.generic import pair_masks
from tests.ssl_app.report.fakes import run_config, sweep_sidecar, write_run

TAU = "model.init_args.loss.init_args.temperature"


@dataclass
class Study:
    """The fake sweep's folder and the numbers written into it, by configuration and seed."""

    root: Path
    finals: dict[str, list[dict[str, float]]]
    linear: dict[str, list[float]]
    effective_negatives: dict[str, list[list[list[float]]]]


def _similarities(seed: int, centre: float, size: int) -> np.ndarray:
    return np.clip(np.random.default_rng(seed).normal(centre, 0.05, size), -1.0, 1.0)


def hardness(loss, seed: int, batch: int = 16):
    """``loss``'s hardness profile of one step of random unit views (SimCLR's masks, 2 × ``batch`` views)."""
    z = F.normalize(torch.randn(2 * batch, 8, generator=torch.Generator().manual_seed(seed)), dim=1)
    return loss(MaskedSimilarities(z @ z.T, *pair_masks(batch)), with_stats=True).hardness


def write_study(root: Path) -> Study:
    """InfoNCE at τ = 0.3 and τ = 0.7, seeds 0 and 1 (seed 1 of τ = 0.7 logs no tolerance), and
    a failed third seed of τ = 0.3 whose numbers must not be averaged."""
    finals = {
        "InfoNCE τ=0.3": [
            {
                "knn_acc": 0.52,
                "uniformity": 3.61,
                "tolerance": 0.179,
                "alignment": 0.612,
                "pos_sim": 0.804,
                "top10_neg_sim": 0.553,
                "effective_rank": 24.1,
                "effective_rank_backbone": 61.2,
                "spectrum_alpha": 0.81,
                "spectrum_alpha_backbone": 0.62,
                "wasserstein_uniformity": -0.412,
                "lidar": 7.9,
                "top10_train_neg_sim": 0.612,
            },
            {
                "knn_acc": 0.48,
                "uniformity": 3.64,
                "tolerance": 0.171,
                "alignment": 0.588,
                "pos_sim": 0.822,
                "top10_neg_sim": 0.531,
                "effective_rank": 25.3,
                "effective_rank_backbone": 63.0,
                "spectrum_alpha": 0.79,
                "spectrum_alpha_backbone": 0.6,
                "wasserstein_uniformity": -0.398,
                "lidar": 8.3,
                "top10_train_neg_sim": 0.598,
            },
        ],
        "InfoNCE τ=0.7": [
            {
                "knn_acc": 0.44,
                "uniformity": 3.17,
                "tolerance": 0.333,
                "alignment": 0.402,
                "pos_sim": 0.912,
                "top10_neg_sim": 0.812,
                "effective_rank": 19.8,
                "effective_rank_backbone": 48.7,
                "spectrum_alpha": 0.95,
                "spectrum_alpha_backbone": 0.71,
                "wasserstein_uniformity": -0.611,
                "lidar": 5.2,
                "top10_train_neg_sim": 0.861,
            },
            {
                "knn_acc": 0.46,
                "uniformity": 3.12,
                "alignment": 0.418,
                "pos_sim": 0.902,
                "top10_neg_sim": 0.836,
                "effective_rank": 20.4,
                "effective_rank_backbone": 50.1,
                "spectrum_alpha": 0.93,
                "spectrum_alpha_backbone": 0.69,
                "wasserstein_uniformity": -0.597,
                "lidar": 5.6,
                "top10_train_neg_sim": 0.874,
            },
        ],
    }
    linear = {"InfoNCE τ=0.3": [0.8327, 0.8301], "InfoNCE τ=0.7": [0.8269, 0.8213]}
    effective = {
        "InfoNCE τ=0.3": [[[40, 40, 40, 40], [30, 30, 30, 30], [10, 12, 14, 16]], [[40] * 4, [30] * 4, [20, 22, 24, 26]]],
        "InfoNCE τ=0.7": [[[90] * 4, [95] * 4, [100, 101, 102, 103]], [[90] * 4, [95] * 4, [110, 111, 112, 113]]],
    }
    for label, tau in (("InfoNCE τ=0.3", 0.3), ("InfoNCE τ=0.7", 0.7)):
        point = f"infonce_t{tau}"
        for seed in (0, 1):
            write_run(
                root / "tau" / point / f"seed{seed}",
                run_config("InfoNCE", seed, temperature=tau),
                finals[label][seed],
                effective_negatives=effective[label][seed],
                linear_top1=linear[label][seed],
                positive=_similarities(seed, finals[label][seed]["pos_sim"], 500),
                negatives=_similarities(seed + 10, finals[label][seed]["top10_neg_sim"], 5000),
                sweep=sweep_sidecar(point, {TAU: tau}, seed),
                hardness=hardness(InfoNCE(tau), seed),
            )
    write_run(  # crashed in epoch 1 with nonsense numbers: listed, never averaged
        root / "tau" / "infonce_t0.3" / "seed2",
        run_config("InfoNCE", 2, temperature=0.3),
        {
            "knn_acc": 0.0,
            "uniformity": 0.0,
            "tolerance": 1.0,
            "alignment": 0.0,
            "pos_sim": 1.0,
            "top10_neg_sim": 1.0,
            "effective_rank": 1.0,
            "effective_rank_backbone": 1.0,
            "spectrum_alpha": 3.0,
            "spectrum_alpha_backbone": 3.0,
            "wasserstein_uniformity": -1.414,
            "lidar": 1.0,
            "top10_train_neg_sim": 1.0,
        },
        epochs=1,
        sweep=sweep_sidecar("infonce_t0.3", {TAU: 0.3}, 2),
        status="failed",
    )
    return Study(root=root / "tau", finals=finals, linear=linear, effective_negatives=effective)


@pytest.fixture(scope="package")
def study(tmp_path_factory) -> Study:
    return write_study(tmp_path_factory.mktemp("study"))
