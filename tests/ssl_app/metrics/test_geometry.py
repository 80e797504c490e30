"""−W₂ (Fang et al. 2024), LiDAR (Thilak et al. 2024) and the effective rank against their reference
implementations, against the Gaussian W₂ computed otherwise, on a constructed collapse, and on 2 gloo ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from scipy.linalg import sqrtm
from scipy.optimize import linear_sum_assignment

from ssl_app.metrics import effective_rank, uniformity
from ssl_app.metrics.geometry import (
    LIDAR_DELTA,
    LIDAR_EPSILON,
    lidar,
    view_statistics,
    wasserstein_distance_to_uniform,
    wasserstein_uniformity,
)
from ssl_app.metrics.rank import moments
from tests.ranks import gloo_rank


def gaussian_rows(kind: str, n: int = 3000, d: int = 16, seed: int = 0) -> torch.Tensor:
    """Constructed embeddings before normalisation: ``isotropic`` N(0, I); ``low_rank`` 3 of d directions;
    ``shifted`` N(0, I) plus 2.5 along the first axis (a cone around it)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    if kind == "low_rank":
        x[:, 3:] = 0
    elif kind == "shifted":
        x[:, 0] += 2.5
    return x


KINDS = ("isotropic", "low_rank", "shifted")


# --------------------------------------------------------------------------- −W₂ and its reference
def wassersteinssl_distance(x: np.ndarray, eps: float = 1e-8) -> float:
    """statsle/WassersteinSSL, ``code/BYOL/metric.py`` (``calc_wasserstein_distance``; the same function in its
    other methods' ``metric.py``), transcribed: N rows of dim d; μ their mean; C the covariance with 1/N;
    eigen-decompose C = Q S Qᵀ (its ``np.linalg.eig``: on a symmetric C the same values, real, which eigh gives
    without the complex round-off), add eps = 1e-8 to S, C^{1/2} = Q sqrt(S) Qᵀ; then
    W = sqrt(Σ μ² + 1 + tr(C − 2/√d · C^{1/2})). Its callers pass the L2-normalised embeddings."""
    n, d = x.shape
    mean = x.mean(axis=0)
    centred = x - mean
    covariance = centred.T @ centred / n
    values, vectors = np.linalg.eigh(covariance)
    root = vectors @ np.diag(np.sqrt(values + eps)) @ vectors.T
    return math.sqrt(float(mean @ mean) + 1 + float(np.trace(covariance - 2.0 / math.sqrt(d) * root)))


@pytest.mark.parametrize("kind", KINDS)
def test_wasserstein_uniformity_equals_the_authors_metric(kind):
    """Catches a wrong sign, a covariance with 1/(N − 1), the unnormalised rows or a missing mean term: −W₂ is
    minus the authors' W on the unit rows. Their ε = 1e-8 under each eigenvalue adds (2/√d) Σ sqrt(λ + ε) − sqrt(λ)
    inside the root: nothing measurable on a full-rank spectrum, up to (2/√d)(d − r)·1e-4 on a rank-r one."""
    z = gaussian_rows(kind)
    unit = F.normalize(z, dim=1).numpy()
    ours = wasserstein_uniformity(z).item()
    assert ours == pytest.approx(-wassersteinssl_distance(unit, eps=0.0), abs=1e-9)
    with_eps = wassersteinssl_distance(unit)
    if kind == "low_rank":  # 13 zero eigenvalues: their ε is visible, and of the size stated in science.md
        d, r = 16, 3
        gap = with_eps**2 - ours**2  # = −(2/√d)·Σ(sqrt(λ + ε) − sqrt(λ)) < 0
        assert -2 / math.sqrt(d) * (d - r) * 1e-4 * 1.01 < gap < -2 / math.sqrt(d) * (d - r) * 1e-4 * 0.99
    else:  # ε/(2 sqrt λ) per eigenvalue: ~1e-6 on these spectra
        assert ours == pytest.approx(-with_eps, abs=1e-5)


def gaussian_w2(mean_a, cov_a, mean_b, cov_b) -> float:
    """The exact W₂ between two Gaussians, the general formula, with scipy's matrix square root:
    ‖μ_a − μ_b‖² + tr(Σ_a + Σ_b − 2 (Σ_b^{1/2} Σ_a Σ_b^{1/2})^{1/2})."""
    root_b = np.real(sqrtm(cov_b))
    cross = np.real(sqrtm(root_b @ cov_a @ root_b))
    squared = float(np.sum((mean_a - mean_b) ** 2) + np.trace(cov_a + cov_b - 2 * cross))
    return math.sqrt(max(squared, 0.0))


@pytest.mark.parametrize("kind", KINDS)
def test_the_closed_form_is_the_w2_to_the_isotropic_gaussian_of_the_sphere(kind):
    """Catches a closed form that drops a term of the general Gaussian W₂ or takes tr Σ^{1/2} wrongly: the same
    distance from scipy's matrix square roots, with N(0, I/d) written out as the second Gaussian."""
    stats = moments(gaussian_rows(kind))
    d = stats.gram.shape[0]
    expected = gaussian_w2(stats.mean.numpy(), stats.covariance.numpy(), np.zeros(d), np.eye(d) / d)
    assert wasserstein_distance_to_uniform(stats).item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_monte_carlo_transport_between_samples_of_the_two_gaussians_costs_w2_squared(kind):
    """Catches a closed form that is not the transport cost: y_i ~ N(0, I/d) and x_i = μ + √d Σ^{1/2} y_i (a sample
    of the Gaussian fit). The cheapest matching of the two samples (scipy's linear_sum_assignment, an exact
    discrete optimal transport) is the pairing i ↔ i, and its mean squared distance, a Monte-Carlo estimate of
    W₂², agrees with the closed form within 4 standard errors."""
    stats = moments(gaussian_rows(kind, d=8))
    d = 8
    mean, covariance = stats.mean.numpy(), stats.covariance.numpy()
    rng = np.random.default_rng(1)
    y = rng.standard_normal((4000, d)) / math.sqrt(d)
    x = mean + math.sqrt(d) * y @ np.real(sqrtm(covariance)).T
    costs = ((x[:300, None, :] - y[None, :300, :]) ** 2).sum(-1)
    rows, columns = linear_sum_assignment(costs)
    assert costs[rows, columns].sum() == pytest.approx(np.trace(costs), rel=1e-9)  # no cheaper matching
    squared = ((x - y) ** 2).sum(1)
    estimate, error = squared.mean(), squared.std() / math.sqrt(len(squared))
    exact = wasserstein_distance_to_uniform(stats).item() ** 2
    assert abs(estimate - exact) < 4 * error + 1e-12


def test_extremes_isotropic_near_zero_one_point_at_minus_root_two():
    """Catches a scale error: many points spread evenly on the sphere are near N(0, I/d) (−W₂ ≈ 0, the more so the
    more points: the sampling noise of μ and Σ is the distance left), every row at one point is −√2 (‖μ‖² = 1, Σ = 0)."""
    many, fewer = (wasserstein_uniformity(gaussian_rows("isotropic", n=n)).item() for n in (20000, 2000))
    assert -0.02 < many < 0 and fewer < many
    one_point = torch.ones(50, 16)
    assert wasserstein_uniformity(one_point).item() == pytest.approx(-math.sqrt(2), abs=1e-12)


# --------------------------------------------------------------------------- LiDAR and its reference
def stable_pretraining_lidar(embeddings: torch.Tensor, n_classes: int, per_class: int) -> float:
    """galilai-group/stable-pretraining, ``stable_pretraining/callbacks/lidar.py`` (``LiDAR._compute_lidar``),
    transcribed: the rows are n_classes contiguous groups of per_class views; class means μ_i, grand mean μ;
    S_b = Σ (μ_i − μ)(μ_i − μ)ᵀ / (n_classes − 1); S_w = Σ (x − μ_i)(x − μ_i)ᵀ / (n_classes (per_class − 1)) + δI,
    δ = 1e-4; S_w^{-1/2} from eigh with eigenvalues clamped at ε = 1e-8; M = S_w^{-1/2} S_b S_w^{-1/2},
    symmetrised; its eigenvalues clamped at 0, plus ε, normalised to p; LiDAR = exp(−Σ p log p)."""
    d = embeddings.shape[1]
    x = embeddings.double().view(n_classes, per_class, d)
    means = x.mean(dim=1)
    centred = means - means.mean(dim=0)
    between = centred.T @ centred / (n_classes - 1)
    within_rows = (x - means[:, None]).reshape(-1, d)
    within = within_rows.T @ within_rows / (n_classes * (per_class - 1)) + LIDAR_DELTA * torch.eye(d, dtype=torch.float64)
    values, vectors = torch.linalg.eigh(within)
    inverse_root = (vectors / values.clamp(min=LIDAR_EPSILON).sqrt()) @ vectors.T
    matrix = inverse_root @ between @ inverse_root
    eig = torch.linalg.eigvalsh(0.5 * (matrix + matrix.T)).clamp(min=0) + LIDAR_EPSILON
    p = eig / eig.sum()
    return float(torch.exp(-(p * p.log()).sum()))


def sample_views(
    n: int = 200, q: int = 10, d: int = 32, signal: int | None = None, noise: float = 0.3, seed: int = 0
) -> torch.Tensor:
    """[n, q, d]: unit rows of n sample centres (spread over ``signal`` of the d directions, default all) plus view noise."""
    signal = d if signal is None else signal
    g = torch.Generator().manual_seed(seed)
    centres = torch.zeros(n, d)
    centres[:, :signal] = torch.randn(n, signal, generator=g)
    views = centres[:, None] + noise * torch.randn(n, q, d, generator=g)
    return F.normalize(views, dim=-1)


@pytest.mark.parametrize("signal", [32, 8, 2])
def test_lidar_equals_stable_pretraining_s(signal):
    """Catches other scatter normalisations (reptrix's sums without 1/(n − 1), a mean over samples), δ or ε
    misplaced, or S_w^{-1/2} S_b S_w^{-1/2} replaced by S_w^{-1} S_b's unsymmetrised eigenvalues."""
    views = sample_views(signal=signal)
    expected = stable_pretraining_lidar(views.reshape(-1, 32), 200, 10)
    assert lidar(views).item() == pytest.approx(expected, rel=1e-9)


def test_lidar_counts_the_directions_that_separate_samples():
    """Catches an LDA of the wrong scatter: with the sample centres in k of 32 directions (and the views' noise in
    all), LiDAR falls with k; views that do not differ from their sample's centre in a direction do not count."""
    values = [lidar(sample_views(signal=k)).item() for k in (32, 16, 8, 4)]
    assert values == sorted(values, reverse=True) and values[-1] < 8 < 16 < values[0]


def test_view_statistics_are_the_sums_of_the_views():
    """Catches a chunk boundary dropping or repeating samples: chunked sums equal the one-block ones."""
    views = sample_views(n=37, q=3, d=5)
    whole, chunked = view_statistics(views), view_statistics(views, chunk_size=4)
    for name in ("mean_sum", "mean_gram", "view_gram"):
        torch.testing.assert_close(getattr(chunked, name), getattr(whole, name), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2 views"):
        view_statistics(views[:, :1])


# --------------------------------------------------------------------------- RankMe against stable-pretraining
def stable_pretraining_rankme(embeddings: torch.Tensor, eps: float = 1e-5) -> float:
    """galilai-group/stable-pretraining, ``stable_pretraining/callbacks/rankme.py``, transcribed: σ =
    ``torch.linalg.svdvals`` of the embeddings as given; p = σ / Σσ + 1e-5; RankMe = exp(−Σ p log p)."""
    sigma = torch.linalg.svdvals(embeddings.double())
    p = sigma / sigma.sum() + eps
    return float(torch.exp(-(p * p.log()).sum()))


@pytest.mark.parametrize("rank", [64, 20, 3])
def test_effective_rank_is_stable_pretraining_s_rankme_without_its_epsilon(rank):
    """Catches an effective rank on other singular values (the Gram matrix's square-rooted eigenvalues are the
    SVD's) or another entropy: on the same unnormalised matrix (what ``effective_rank_backbone`` reads) ours is
    the reference with its ε = 1e-5 taken out (to 1e-5: ours takes σ as the square roots of the Gram matrix's
    eigenvalues, so a zero σ comes out near 1e-8 σ_1); with it, the reference's value is larger by the ε-terms'
    entropy (docs/science.md): to first order −ε Σ_{p>0} (log p + 1) − z ε log ε, z the zero σ; 0.2–0.7% here."""
    g = torch.Generator().manual_seed(rank)
    features = torch.randn(500, rank, generator=g, dtype=torch.float64) @ torch.randn(rank, 64, generator=g, dtype=torch.float64)
    ours = effective_rank(features, normalize=False).item()
    assert ours == pytest.approx(stable_pretraining_rankme(features, eps=0.0), rel=1e-5)
    theirs = stable_pretraining_rankme(features)
    sigma = torch.linalg.svdvals(features)
    p = (sigma / sigma.sum())[:rank]
    eps, zeros = 1e-5, 64 - rank
    first_order = -eps * (p.log() + 1).sum().item() - zeros * eps * math.log(eps)
    assert math.log(theirs / ours) == pytest.approx(first_order, rel=0.05)
    assert 1e-3 < math.log(theirs / ours) < 1e-2


# --------------------------------------------------------------------------- a collapse uniformity does not see
N, D, GROUP = 1024, 64, 16
COLLAPSE_STEPS = (64, 48, 32, 24)  # directions used, step by step


def collapsed(k: int, pull: float) -> torch.Tensor:
    """Unit rows spread isotropically over k of D directions, each row pulled by ``pull`` towards the first row of
    its group of 16: the pull lowers uniformity (close pairs), barely the spectrum (the groups' rows spread in k)."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(N, D, dtype=torch.float64)
    x[:, :k] = torch.randn(N, k, generator=g, dtype=torch.float64)
    x = F.normalize(x, dim=1)
    leaders = x[::GROUP].repeat_interleave(GROUP, dim=0)
    return F.normalize((1 - pull) * x + pull * leaders, dim=1)


def at_uniformity(k: int, target: float) -> torch.Tensor:
    """``collapsed(k, pull)`` with the pull that brings its Wang–Isola uniformity to ``target`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(45):
        middle = (low + high) / 2
        low, high = (middle, high) if uniformity(collapsed(k, middle)).item() > target else (low, middle)
    return collapsed(k, low)


def test_a_step_by_step_collapse_at_constant_uniformity_is_ranked_by_w2_and_the_effective_rank():
    """Fang et al.'s point: embeddings using 64, 48, 32, 24 of 64 directions, at one Wang–Isola uniformity (to
    1e-9, so uniformity cannot order them), are put in order by −W₂ and by the effective rank."""
    target = uniformity(collapsed(COLLAPSE_STEPS[-1], 0.0)).item()
    steps = [at_uniformity(k, target) for k in COLLAPSE_STEPS]
    uniformities = [uniformity(z).item() for z in steps]
    assert max(uniformities) - min(uniformities) < 1e-9  # no order to read
    w2 = [wasserstein_uniformity(z).item() for z in steps]
    ranks = [effective_rank(z).item() for z in steps]
    assert all(a > b + 0.05 for a, b in zip(w2, w2[1:])), w2
    assert all(a > b + 4 for a, b in zip(ranks, ranks[1:])), ranks
    # Without the compensating pull, uniformity orders them too, but by less than the pull moves it.
    plain = [uniformity(collapsed(k, 0.0)).item() for k in COLLAPSE_STEPS]
    assert plain == sorted(plain, reverse=True) and plain[0] - plain[-1] < 0.25


# --------------------------------------------------------------------------- 2 gloo ranks = 1 process
WORLD = 2


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, WORLD, init_file):
        z = gaussian_rows("shifted", n=1001)  # odd: unequal row ranges
        views = sample_views(n=101, q=4, d=16)
        torch.save(
            {
                "w2": wasserstein_uniformity(z, chunk_size=97),
                "lidar": lidar(views, chunk_size=13),
                "stats": view_statistics(views),
            },
            f"{out_dir}/rank{rank}.pt",
        )


@pytest.mark.slow  # real processes (gloo)
def test_two_ranks_sum_the_statistics_one_process_sums(tmp_path):
    """Catches a rank computing −W₂ or LiDAR from its own rows only, or the sums added twice: each of 2 gloo
    ranks, given the gathered rows, returns the single-process value."""
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    z, views = gaussian_rows("shifted", n=1001), sample_views(n=101, q=4, d=16)
    single = view_statistics(views)
    for rank in range(WORLD):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert result["w2"].item() == pytest.approx(wasserstein_uniformity(z).item(), abs=1e-12)
        assert result["lidar"].item() == pytest.approx(lidar(views).item(), rel=1e-9)
        torch.testing.assert_close(result["stats"].view_gram, single.view_gram, rtol=0, atol=1e-9)


def test_a_non_finite_view_drops_its_sample_from_lidar_and_is_counted():
    """Catches a NaN view reaching the LDA (every eigenvalue NaN) or dropped without being counted."""
    from ssl_app.metrics import EmbeddingInputs, evaluate_metrics

    clean = torch.randn(20, 8)
    views = sample_views(n=20, q=3, d=8)
    broken = views.clone()
    broken[4, 1, 0] = float("nan")
    x = EmbeddingInputs(clean, torch.zeros(20, dtype=torch.long), clean, clean, multiview=broken)
    report = evaluate_metrics(x, names=("lidar",))
    keep = torch.arange(20) != 4
    assert report.nonfinite == 1 and report.total == 20 + 20 + 20  # two view inputs and the 20 samples of q views
    assert report.value("lidar") == pytest.approx(lidar(views[keep]).item(), rel=1e-6)  # read as float32
