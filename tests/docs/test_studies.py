"""The recorded studies read under the report's statistics (issue 40 item 11), checked from their committed files.

docs/study.md, docs/hardness_study.md and docs/tau_study.md quote comparisons; each study's folder holds what was
recorded (``table.csv``: means, stds, n, and for the τ study the report's paired intervals) and what
``docs/reread_studies.py`` derived from it (``comparisons.csv``). Here scipy recomputes every derived number from
the recorded ones (paired t-tests on constructed differences with the recorded mean and std, Holm's step-down
written out as the rule), every comparison a page quotes is matched to its row, no sentence calls a pair
"separated" or "distinguishable" (except in reporting the pages' earlier reading), and every decimal a claim
quotes is found in a recorded file. docs/beyond_study.md (issue 41 item 3) recorded its per-seed values
(``beyond_study/per_seed.csv``), so its pairs are recomputed from the seeds themselves with scipy's paired test.
No training: a few CSVs and four pages.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
from pathlib import Path

import pytest
from scipy import stats

DOCS = Path(__file__).resolve().parents[2] / "docs"
ALPHA = 0.05
MINUS = "−"
SUMMARY_STUDIES = ("study", "hardness_study")
CLAIMS_HEADING = re.compile(r"^## What it (?:shows|reproduces)", re.MULTILINE)
#: "Δ +0.431 (paired ±0.010–0.193; excludes 0, Holm: depends on the pairing)"
SUMMARY_QUOTE = re.compile(
    r"Δ ([+−]\d+\.\d+) \(paired ±(\d+\.\d+)–(\d+\.\d+); (excludes 0|covers 0|depends on the pairing), "
    r"Holm: (called|not called|depends on the pairing)\)"
)
#: "−0.245 [−0.430, −0.059]" (the τ study's paired intervals)
INTERVAL_QUOTE = re.compile(r"([+−]?\d+\.\d+) \[([+−]?\d+\.\d+), ([+−]?\d+\.\d+)\]")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")


def number(text: str) -> float:
    return float(text.replace(MINUS, "-"))


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def claims(name: str) -> str:
    """The page's claims: from its "What it shows/reproduces" heading to the next top-level section."""
    text = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    start = CLAIMS_HEADING.search(text)
    assert start, f"{name}.md has no claims section"
    end = text.find("\n## ", start.end())
    return " ".join(text[start.start() : end if end > 0 else len(text)].split())


def digits(text: str) -> int:
    return len(text.split(".")[1])


def paired_test(delta: float, sd: float, n: int):
    """scipy's one-sample t-test (= the paired test) on n differences with mean ``delta`` and sample std ``sd``."""
    centred = [-1.0, 0.0, 1.0] if n == 3 else [-1 / math.sqrt(2), 1 / math.sqrt(2)]
    return stats.ttest_1samp([delta + sd * c for c in centred], 0.0)


def holm_rejects(p_values: list[float]) -> list[bool]:
    """Holm's step-down rule: reject p_(1), p_(2), … while p_(i) ≤ α / (m − i + 1); stop at the first that is not."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > ALPHA / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected


# --- docs/study and docs/hardness_study: comparisons bounded from means and stds --------------------------------


@pytest.mark.parametrize("name", SUMMARY_STUDIES)
def test_summary_comparisons_are_recomputed_from_the_recorded_table(name):
    """Δ, the paired interval's half-width range over the seeds' unrecorded pairing (|s_a − s_b| ≤ s_d ≤ s_a + s_b),
    its verdict, Welch's interval and Holm's decisions (monotone: worst-case p all called, best-case p none)."""
    table = {row["configuration"]: row for row in rows(DOCS / name / "table.csv")}
    found = rows(DOCS / name / "comparisons.csv")
    assert len(found) > 20
    best, worst = [], []
    for row in found:
        a, b, metric = table[row["a"]], table[row["b"]], row["metric"]
        ma, sa, mb, sb = (float(x[f"{metric}_{part}"]) for x in (a, b) for part in ("mean", "std"))
        n = int(row["n"])
        assert n == 3 == int(a[f"{metric}_n"]) == int(b[f"{metric}_n"])
        delta = ma - mb
        assert float(row["delta"]) == pytest.approx(delta, abs=1e-12)
        narrow, wide = (paired_test(delta, sd, n) for sd in (abs(sa - sb), sa + sb))
        for test, half in ((narrow, "paired_half_min"), (wide, "paired_half_max")):
            low, high = test.confidence_interval(0.95)
            assert float(row[half]) == pytest.approx((high - low) / 2, rel=1e-9, abs=1e-12)
        assert float(row["paired_p_max"]) == pytest.approx(wide.pvalue, rel=1e-9)
        best.append(narrow.pvalue if abs(sa - sb) > 0 else 0.0)
        worst.append(wide.pvalue)
        if abs(delta) > float(row["paired_half_max"]):
            assert row["paired_interval"] == "excludes 0"
        elif abs(delta) <= float(row["paired_half_min"]):
            assert row["paired_interval"] == "covers 0"
        else:
            assert row["paired_interval"] == "depends on the pairing"
        welch = stats.ttest_ind_from_stats(ma, sa, n, mb, sb, n, equal_var=False)
        dof = (sa**2 / n + sb**2 / n) ** 2 / ((sa**2 / n) ** 2 / (n - 1) + (sb**2 / n) ** 2 / (n - 1))
        half = stats.t.ppf(0.975, dof) * math.sqrt(sa**2 / n + sb**2 / n)
        assert float(row["welch_low"]) == pytest.approx(delta - half, abs=1e-9)
        assert stats.t.sf(abs(welch.statistic), dof) * 2 == pytest.approx(welch.pvalue, rel=1e-9)
        assert row["sd_separated"] == str(abs(delta) > sa + sb)
        assert int(row["holm_m"]) == len(found)
    for row, lucky, unlucky in zip(found, holm_rejects(best), holm_rejects(worst)):
        assert row["holm"] == ("called" if unlucky else "not called" if not lucky else "depends on the pairing")


def summary_quote(row: dict[str, str]) -> str:
    d = 2 if row["metric"] in ("knn_acc", "linear_top1") else 3
    delta = float(row["delta"])
    sign = MINUS if delta < 0 else "+"
    half = f"±{float(row['paired_half_min']):.{d}f}–{float(row['paired_half_max']):.{d}f}"
    return f"Δ {sign}{abs(delta):.{d}f} (paired {half}; {row['paired_interval']}, Holm: {row['holm']})"


@pytest.mark.parametrize("name", SUMMARY_STUDIES)
def test_every_quoted_comparison_is_a_recorded_row(name):
    """Each "Δ … (paired ±…; verdict, Holm: decision)" of a page is one row of its comparisons.csv, verdicts
    included, and the page states the number of comparisons Holm adjusts for."""
    found = rows(DOCS / name / "comparisons.csv")
    recorded = {summary_quote(row) for row in found}
    text = claims(name)
    quotes = [match.group(0) for match in SUMMARY_QUOTE.finditer(text)]
    assert len(quotes) >= 10, f"{name}.md quotes too few paired comparisons"
    assert [q for q in quotes if q not in recorded] == []
    assert f"m = {len(found)}" in text
    called = sum(row["holm"] == "called" for row in found)
    stated = re.search(r"Only (\d+) of the (\d+)\s+are called|Holm calls none of\s+the (\d+)", text)
    assert stated, "the page states how many comparisons Holm calls"
    if stated.group(1):
        assert (int(stated.group(1)), int(stated.group(2))) == (called, len(found))
    else:
        assert called == 0 and int(stated.group(3)) == len(found)


# --- docs/tau_study: the report's recorded paired intervals, Holm over them --------------------------------------


def test_tau_comparisons_match_the_report_and_holm():
    """The rows from table.csv carry its full-precision intervals; each p-value is the paired t-test whose 95%
    interval is the recorded one; Holm's step-down over the ≥ 3-pair ones gives the decisions."""
    table = {row["configuration"]: row for row in rows(DOCS / "tau_study" / "table.csv")}
    found = rows(DOCS / "tau_study" / "comparisons.csv")
    for row in found:
        n, delta, low, high = int(row["pairs"]), float(row["delta"]), float(row["low"]), float(row["high"])
        if row["source"] == "table.csv":
            cells = table[row["configuration"]]
            key = row["metric"]
            assert (delta, low, high, n) == (
                float(cells[f"{key}_paired_delta"]),
                float(cells[f"{key}_paired_low"]),
                float(cells[f"{key}_paired_high"]),
                int(cells[f"{key}_paired_n"]),
            )
        sd = (high - low) / 2 / stats.t.ppf(0.975, n - 1) * math.sqrt(n)
        test = paired_test(delta, sd, n)
        interval = test.confidence_interval(0.95)
        assert (interval.high - interval.low) / 2 == pytest.approx((high - low) / 2, rel=1e-9)
        if row["source"] == "table.csv":  # full precision; the --baseline ones were printed at 3 digits
            assert interval.low == pytest.approx(low, rel=1e-9)
        assert (low + high) / 2 == pytest.approx(delta, abs=0.06)
        assert float(row["p"]) == pytest.approx(test.pvalue, rel=1e-9)
        assert row["interval"] == ("covers 0" if low <= 0 <= high else "excludes 0")
    tested = [row for row in found if int(row["pairs"]) >= 3]
    assert len(tested) == int(found[0]["holm_m"]) == 46
    for row, rejected in zip(tested, holm_rejects([float(row["p"]) for row in tested])):
        assert row["holm"] == ("called" if rejected else "not called")
    assert all(row["holm"].startswith("not tested") for row in found if int(row["pairs"]) < 3)


def test_tau_page_quotes_recorded_intervals_and_decisions():
    """Every "Δ [low, high]" of the claims is a recorded interval (either sign order as ★ and row are named);
    every p̃ it quotes is a recorded Holm p̃; it states m and how many Holm calls."""
    found = rows(DOCS / "tau_study" / "comparisons.csv")
    text = claims("tau_study")

    def matches(quote: re.Match, row: dict[str, str]) -> bool:
        values = [number(quote.group(i)) for i in (1, 2, 3)]
        recorded = [float(row[part]) for part in ("delta", "low", "high")]
        pairs = enumerate(zip(values, recorded))
        return all(round(r, digits(quote.group(i + 1))) == pytest.approx(v, abs=1e-9) for i, (v, r) in pairs)

    quotes = list(INTERVAL_QUOTE.finditer(text))
    assert len(quotes) >= 20
    assert [q.group(0) for q in quotes if not any(matches(q, row) for row in found)] == []
    holm_p = [float(row["holm_p"]) for row in found if row["holm_p"]]
    for group in re.findall(r"p̃ ([\d., and]+)\)", text):
        for value in re.findall(r"\d+\.\d+", group):
            assert any(round(p, digits(value)) == pytest.approx(float(value)) for p in holm_p), value
    called = sum(row["holm"] == "called" for row in found)
    assert f"Holm calls {called} of the {len(holm_p)}" in text and f"m = {len(holm_p)}" in text
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(*])", text):  # a 2-pair interval is shown, never read as a test
        for quote in INTERVAL_QUOTE.finditer(sentence):
            if all(int(row["pairs"]) < 3 for row in found if matches(quote, row)):
                assert "not tested" in sentence, sentence


def test_tau_epoch_means_follow_the_schedule():
    """The recorded epoch τ of the cosine runs is the schedule's τ at each epoch's last step (9 steps an epoch)."""
    means = rows(DOCS / "tau_study" / "epoch_means.csv")
    taus = {int(r["epoch"]): float(r["mean_over_seeds"]) for r in means if r["metric"] == "tau"}
    assert sorted(taus) == list(range(1, 13))
    for epoch, tau in taus.items():
        t = epoch - 1 / 9
        assert tau == pytest.approx(0.1 + 0.9 * (1 + math.cos(2 * math.pi * t / 12)) / 2, abs=5e-4)


# --- all four pages ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", (*SUMMARY_STUDIES, "tau_study", "beyond_study"))
def test_no_sentence_claims_a_separation(name):
    """ "separated" / "distinguishable" (not negated) appear only where a page reports its earlier reading."""
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z(*])", claims(name)):
        for hit in re.finditer(r"(\bnot |\bun)?(separated|distinguishable)\b", sentence):
            if hit.group(1):
                continue
            assert re.search(r"page (?:called|read)|page's|old rule", sentence), f"{name}.md: {sentence}"


def recorded_numbers() -> set[float]:
    """Every number in the studies' committed CSVs (cells, and numbers inside labels) and the paper's (science.md)."""
    found: set[float] = {stats.t.ppf(0.975, 2)}  # the t quantile the pages name
    for path in sorted(DOCS.glob("*study/*.csv")):
        for row in rows(path):
            for cell in row.values():
                try:
                    found.add(abs(float(cell)))
                except ValueError:
                    found.update(float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell or ""))
    found.update(float(x) for x in re.findall(r"\d+\.\d+", (DOCS / "science.md").read_text(encoding="utf-8")))
    return found


@pytest.mark.parametrize("name", (*SUMMARY_STUDIES, "tau_study", "beyond_study"))
def test_every_quoted_decimal_is_recorded(name):
    """Each decimal a claim quotes rounds from a number of a committed file: nothing quoted from a lost run."""
    recorded = recorded_numbers()
    missing = []
    for quoted in DECIMAL.findall(claims(name)):
        d = digits(quoted)
        if not any(abs(round(value, d) - float(quoted)) < 1e-9 for value in recorded):
            missing.append(quoted)
    assert missing == [], f"{name}.md quotes numbers no committed file records: {missing}"


# --- docs/hardness_study: the profiles read back from the committed figure ---------------------------------------


def test_profile_slopes_read_from_the_figure_are_recorded_and_fitted_on_their_bins():
    """Reading the committed figure again gives the recorded points; each slope is scipy's fit on the bins it
    names; the curves with a share in every bin give back the recorded (weighted, per-run) slopes, which is what
    makes the hard loss's kept-bin slope, flatter than InfoNCE's, a reading to trust."""
    spec = importlib.util.spec_from_file_location("reread_studies", DOCS / "reread_studies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    points = rows(DOCS / "hardness_study" / "profile_read.csv")
    read = module.read_profiles(DOCS / "hardness_study" / "hardness_profile.png")
    assert [(p["configuration"], p["s"]) for p in read] == [(p["configuration"], float(p["s"])) for p in points]
    assert [p["mean_share"] for p in read] == pytest.approx([float(p["mean_share"]) for p in points], rel=1e-9)
    slopes = rows(DOCS / "hardness_study" / "profile_read_slopes.csv")
    for fit in slopes:
        used = [p for p in points if p["configuration"] == fit["configuration"]]
        used = [p for p in used if float(fit["s_low"]) - 1e-9 <= float(p["s"]) <= float(fit["s_high"]) + 1e-9]
        assert len(used) == int(fit["points"]) >= 5
        line = stats.linregress([float(p["s"]) for p in used], [math.log(float(p["mean_share"])) for p in used])
        assert float(fit["log_slope"]) == pytest.approx(line.slope, rel=1e-9)
    recorded = {r["configuration"]: float(r["log_slope_mean"]) for r in rows(DOCS / "hardness_study" / "profile_slopes.csv")}
    every_bin = {f["configuration"]: float(f["log_slope"]) for f in slopes if f["bins"] == "every bin with a point"}
    for name in ("Debiased τ=0.5 tau_plus=0.1", "MACL τ=0.5 a_0=0 alpha=0.5", "Hypersphere λ=1 alpha=2 t=2"):
        assert every_bin[name] == pytest.approx(recorded[name], abs=0.1)
    kept = {f["configuration"]: float(f["log_slope"]) for f in slopes if f["bins"] != "every bin with a point"}
    assert kept["HardContrastive τ=0.5 q=0.1"] < recorded["InfoNCE τ=0.5"] < recorded["HardContrastive τ=0.5 q=0.1"]


# --- docs/beyond_study: per-seed values recorded, every pair recomputed from them --------------------------------

BEYOND = DOCS / "beyond_study"
#: "Δ +0.362 [+0.118, +0.606] (p̃ 0.351, not called)" (docs/beyond_study.py's quote)
BEYOND_QUOTE = re.compile(r"Δ [+−]\d+\.\d+ \[[+−]\d+\.\d+, [+−]\d+\.\d+\] \(p̃ (?:<0\.001|\d\.\d+), (?:called|not called)\)")


def beyond_values(metric: str) -> dict[tuple[str, str], float]:
    """``{(configuration, seed): value}`` of one metric from the recorded per-seed values."""
    found = {}
    for row in rows(BEYOND / "per_seed.csv"):
        if row[metric]:
            found[(row["configuration"], row["seed"])] = float(row[metric])
    return found


def test_beyond_per_seed_values_give_the_report_table():
    """The report's table (means, stds, n) is what the recorded per-seed values give: the seeds beside the table
    are the table's seeds; and each run's validation (where −W₂ and LiDAR come from) gave back its training's last
    kNN, uniformity and effective rank, so the geometry metrics belong to the state the table describes."""
    table = {row["configuration"]: row for row in rows(BEYOND / "table.csv")}
    seeds = rows(BEYOND / "per_seed.csv")
    assert len(seeds) == 15 and len(table) == 5
    for metric in ("knn_acc", "uniformity", "tolerance", "effective_rank", "effective_rank_backbone"):
        for label, cells in table.items():
            values = [float(r[metric]) for r in seeds if r["configuration"] == label]
            assert len(values) == int(cells[f"{metric}_n"]) == 3
            assert sum(values) / 3 == pytest.approx(float(cells[f"{metric}_mean"]), rel=1e-9)
            assert stats.tstd(values) == pytest.approx(float(cells[f"{metric}_std"]), rel=1e-6)
    for row in seeds:  # the validation of the last checkpoint re-measured the training's last state
        for metric in ("knn_acc", "uniformity", "effective_rank"):
            assert float(row[f"validate_{metric}"]) == pytest.approx(float(row[metric]), rel=1e-6)


def test_beyond_comparisons_are_recomputed_from_the_per_seed_values():
    """Each pair's Δ, 95% interval and p is scipy's paired test on the recorded seeds; Holm's step-down over all m
    rows gives the decisions; the quote the page uses is the row's numbers."""
    found = rows(BEYOND / "comparisons.csv")
    assert len(found) >= 40
    for row in found:
        values = beyond_values(row["metric"])
        seeds = row["seeds"].split()
        a = [values[(row["a"], seed)] for seed in seeds]
        b = [values[(row["b"], seed)] for seed in seeds]
        test = stats.ttest_rel(a, b)
        interval = test.confidence_interval(0.95)
        assert float(row["delta"]) == pytest.approx(sum(x - y for x, y in zip(a, b)) / len(a), rel=1e-9, abs=1e-12)
        assert (float(row["low"]), float(row["high"])) == pytest.approx((interval.low, interval.high), rel=1e-7, abs=1e-9)
        assert float(row["p"]) == pytest.approx(test.pvalue, rel=1e-7)
        assert row["interval"] == ("covers 0" if interval.low <= 0 <= interval.high else "excludes 0")
        assert int(row["holm_m"]) == len(found)
        d = int(row["digits"])
        text = f"Δ {number_text(float(row['delta']), d)} [{number_text(interval.low, d)}, {number_text(interval.high, d)}]"
        assert row["quote"].startswith(text + " (p̃ ")
    for row, rejected in zip(found, holm_rejects([float(row["p"]) for row in found])):
        assert row["holm"] == ("called" if rejected else "not called")
        assert row["quote"].endswith(f", {row['holm']})")


def number_text(value: float, digits: int) -> str:
    return f"{MINUS if value < 0 else '+'}{abs(value):.{digits}f}"


def test_beyond_page_quotes_recorded_comparisons():
    """Every paired comparison the page quotes is one recorded row, read in its sentence with the row's verdict
    (an interval covering 0 is never a difference); the page states m and how many Holm calls."""
    found = rows(BEYOND / "comparisons.csv")
    recorded = {row["quote"]: row for row in found}
    text = claims("beyond_study")
    quotes = BEYOND_QUOTE.findall(text)
    assert len(quotes) >= 10, "beyond_study.md quotes too few paired comparisons"
    assert [q for q in quotes if q not in recorded] == []
    called = sum(row["holm"] == "called" for row in found)
    assert f"m = {len(found)}" in text
    assert re.search(rf"Holm calls {called} of\s+the {len(found)}", text), "the page states how many Holm calls"
