"""The recorded studies read under the report's statistics (issue 40 item 11), checked from their committed files.

Every study (``RERUN``: docs/study.md, docs/hardness_study.md, docs/tau_study.md) was re-run with its per-seed
values kept beside its tables: the report's ``runs.csv`` (every run's configuration, seed and final values), the
run records' ``fits.csv`` (commit, status and wall time of every fit and evaluation) and the page's scripts'
per-run CSVs. Here the report's table (means, stds, n, and its paired section against ★ with Holm over its m) is
recomputed from ``runs.csv``; every comparison the page makes is scipy's paired test on the committed per-seed
values, Holm's step-down (written out as the rule) over the page's stated m; every quoted comparison is one
recorded row; every "mean ± std" a page quotes is a configuration's mean and sample std in a committed file and
every other decimal of its claims rounds from a number of its own folder; the hardness profiles' slopes are
refitted on the bins they name from the recorded per-bin shares. docs/beyond_study.md (issue 41 item 3) is checked
the same way from its ``per_seed.csv``. No sentence of any page calls a pair "separated" or "distinguishable"
(except in reporting a page's earlier reading). No training: a few CSVs and four pages.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
import statistics
import sys
from pathlib import Path

import pytest
from scipy import stats

DOCS = Path(__file__).resolve().parents[2] / "docs"
ALPHA = 0.05
MINUS = "−"
#: The studies re-run with per-seed values kept: their folder holds the report's table.csv and runs.csv, the
#: page's per-seed script outputs, and docs/paired_studies.py's comparisons.csv.
RERUN = ("study", "hardness_study", "tau_study")
CLAIMS_HEADING = re.compile(r"^## What it (?:shows|reproduces)", re.MULTILINE)
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


def holm_rejects(p_values: list[float]) -> list[bool]:
    """Holm's step-down rule: reject p_(1), p_(2), … while p_(i) ≤ α / (m − i + 1); stop at the first that is not."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > ALPHA / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected


# --- every page ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", (*RERUN, "beyond_study"))
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


@pytest.mark.parametrize("name", ("beyond_study",))
def test_every_quoted_decimal_is_recorded(name):
    """Each decimal a claim quotes rounds from a number of a committed file: nothing quoted from a lost run."""
    recorded = recorded_numbers()
    missing = []
    for quoted in DECIMAL.findall(claims(name)):
        d = digits(quoted)
        if not any(abs(round(value, d) - float(quoted)) < 1e-9 for value in recorded):
            missing.append(quoted)
    assert missing == [], f"{name}.md quotes numbers no committed file records: {missing}"


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


# --- the re-run studies: per-seed values kept beside every table (runs.csv), every comparison computed ----------

#: "Δ +0.362 [+0.118, +0.606] (p̃ 0.351, not called)" (docs/paired_studies.py's and docs/beyond_study.py's quote)
PAIRED_QUOTE = re.compile(r"Δ [+−]\d+\.\d+ \[[+−]\d+\.\d+, [+−]\d+\.\d+\] \(p̃ (?:<0\.001|\d\.\d+), (?:called|not called)\)")
#: "2.553 ± 0.098": a mean ± sample std the page quotes
MEAN_STD = re.compile(r"(?<![\w.])([−-]?\d+\.\d+) ± (\d+\.\d+)")


def paired_studies():
    spec = importlib.util.spec_from_file_location("paired_studies", DOCS / "paired_studies.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through its module
    spec.loader.exec_module(module)
    return module


def seed_values(name: str, sources) -> dict[tuple[str, str], dict[str, float]]:
    """``{(configuration, seed): {column: value}}`` from a study's committed per-seed CSVs."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for source in sources:
        for row in rows(DOCS / name / source):
            values = found.setdefault((row["configuration"], row["seed"]), {})
            for key, cell in row.items():
                try:
                    values[key] = float(cell)
                except (TypeError, ValueError):
                    continue
    return found


@pytest.mark.parametrize("name", RERUN)
def test_runs_csv_gives_the_report_table_and_its_paired_section(name):
    """The report's table (means, stds, n) is what the committed per-seed values give, and its paired differences
    against ★ (Δ, 95% interval, p) are scipy's paired test on them, Holm over the report's m tests."""
    table = rows(DOCS / name / "table.csv")
    seeds = rows(DOCS / name / "runs.csv")
    assert len(seeds) == sum(int(row["n"]) for row in table) >= 3 * len(table)
    star = [row for row in table if row["paired_reference"] == "1"]
    assert len(star) == 1
    reference = star[0]["configuration"]
    tested = []
    for row in table:
        mine = [r for r in seeds if r["configuration"] == row["configuration"]]
        for key in [k.removesuffix("_mean") for k in row if k.endswith("_mean")]:
            values = [float(r[key]) for r in mine if r[key]]
            assert len(values) == int(row[f"{key}_n"] or 0), (row["configuration"], key)
            if not values:
                continue
            assert statistics.fmean(values) == pytest.approx(float(row[f"{key}_mean"]), rel=1e-9, abs=1e-12)
            if len(values) > 1:
                assert statistics.stdev(values) == pytest.approx(float(row[f"{key}_std"]), rel=1e-6, abs=1e-12)
            if row["configuration"] == reference or not row.get(f"{key}_paired_p"):
                continue
            ours = {r["seed"]: float(r[key]) for r in mine if r[key]}
            theirs = {r["seed"]: float(r[key]) for r in seeds if r["configuration"] == reference and r[key]}
            shared = sorted(ours.keys() & theirs.keys())
            test = stats.ttest_rel([ours[s] for s in shared], [theirs[s] for s in shared])
            interval = test.confidence_interval(0.95)
            assert int(row[f"{key}_paired_n"]) == len(shared) >= 3
            delta = statistics.fmean(ours[s] - theirs[s] for s in shared)
            assert float(row[f"{key}_paired_delta"]) == pytest.approx(delta, rel=1e-9, abs=1e-12)
            low, high = float(row[f"{key}_paired_low"]), float(row[f"{key}_paired_high"])
            assert (low, high) == pytest.approx((interval.low, interval.high), rel=1e-7, abs=1e-9)
            assert float(row[f"{key}_paired_p"]) == pytest.approx(test.pvalue, rel=1e-7, abs=1e-12)
            tested.append((float(row[f"{key}_paired_p"]), float(row[f"{key}_paired_holm_p"])))
    m = len(tested)
    assert m > 0
    for (_, holm_p), rejected in zip(tested, holm_rejects([p for p, _ in tested])):
        assert (holm_p <= ALPHA) == rejected
    text = (DOCS / name / "table.md").read_text(encoding="utf-8")
    assert f"Comparisons tested: m = {m} " in text
    assert f"m = {m}:" in claims(name), "the page names the report's own family and its m"


#: "24 to 83 s a fit (median 45 s), 16.4 minutes of fit time": the page's time, from the run records
FIT_TIMES = re.compile(r"(\d+) to (\d+) s a fit \(median (\d+(?:\.\d+)?) s\), (\d+\.\d) minutes of fit time")


@pytest.mark.parametrize("name", RERUN)
def test_a_rerun_page_quotes_its_fit_times_and_commit_from_the_run_records(name):
    """The time a page states is its runs' records' (``fits.csv``): fastest, slowest, median fit and the sum; every
    run ended done, at the commit the page names."""
    fits = [row for row in rows(DOCS / name / "fits.csv") if row["kind"] == "fit"]
    seconds = [float(row["seconds"]) for row in fits]
    page = " ".join((DOCS / f"{name}.md").read_text(encoding="utf-8").split())
    stated = FIT_TIMES.search(page)
    assert stated, f"{name}.md states no fit times"
    assert (int(stated.group(1)), int(stated.group(2))) == (round(min(seconds)), round(max(seconds)))
    assert stated.group(3) == f"{statistics.median(seconds):g}"
    assert float(stated.group(4)) == round(sum(seconds) / 60, 1)
    assert {row["status"] for row in fits} == {"done"}
    commits = {row["git_commit"][:7] for row in fits}
    assert len(commits) == 1 and f"commit {commits.pop()}" in page


@pytest.mark.parametrize("name", RERUN)
def test_rerun_comparisons_are_recomputed_from_the_per_seed_values(name):
    """Each comparison's Δ, 95% interval and p is scipy's paired test on the committed per-seed values; Holm's
    step-down over all m rows of the page gives the decisions; the quote the page uses is the row's numbers."""
    family = paired_studies().FAMILIES[name]
    values = seed_values(name, family.sources)
    found = rows(DOCS / name / "comparisons.csv")
    assert [(r["metric"], r["a"], r["b"]) for r in found] == list(family.comparisons)
    for row in found:
        seeds = row["seeds"].split()
        assert seeds == sorted(s for (label, s), v in values.items() if label == row["a"] and row["metric"] in v)
        a = [values[(row["a"], s)][row["metric"]] for s in seeds]
        b = [values[(row["b"], s)][row["metric"]] for s in seeds]
        test = stats.ttest_rel(a, b)
        interval = test.confidence_interval(0.95)
        assert float(row["delta"]) == pytest.approx(sum(x - y for x, y in zip(a, b)) / len(a), rel=1e-9, abs=1e-12)
        if all(x - y == a[0] - b[0] for x, y in zip(a, b)):  # equal differences: no spread, p = 0 by the report's rule
            assert float(row["p"]) == 0.0
        else:
            assert (float(row["low"]), float(row["high"])) == pytest.approx((interval.low, interval.high), rel=1e-7, abs=1e-9)
            assert float(row["p"]) == pytest.approx(test.pvalue, rel=1e-7, abs=1e-15)
        assert row["interval"] == ("covers 0" if float(row["low"]) <= 0 <= float(row["high"]) else "excludes 0")
        assert int(row["holm_m"]) == len(found)
        d = int(row["digits"])
        low, high = (number_text(float(row[part]), d) for part in ("low", "high"))
        assert row["quote"].startswith(f"Δ {number_text(float(row['delta']), d)} [{low}, {high}] (p̃ ")
    for row, rejected in zip(found, holm_rejects([float(row["p"]) for row in found])):
        assert row["holm"] == ("called" if rejected else "not called")
        assert row["quote"].endswith(f", {row['holm']})")


@pytest.mark.parametrize("name", RERUN)
def test_rerun_page_quotes_recorded_comparisons(name):
    """Every paired comparison the page quotes is one recorded row; the page states m and how many Holm calls."""
    found = rows(DOCS / name / "comparisons.csv")
    recorded = {row["quote"] for row in found}
    text = claims(name)
    quotes = PAIRED_QUOTE.findall(text)
    assert len(quotes) >= 10, f"{name}.md quotes too few paired comparisons"
    assert [q for q in quotes if q not in recorded] == []
    called = sum(row["holm"] == "called" for row in found)
    assert f"m = {len(found)}" in text
    assert re.search(rf"Holm calls {called} of\s+the {len(found)}", text), "the page states how many Holm calls"
    report_m = re.search(r"Comparisons tested: m = (\d+) ", (DOCS / name / "table.md").read_text(encoding="utf-8"))
    stated = {int(m) for m in re.findall(r"\bm = (\d+)", text)}
    assert stated <= {len(found), int(report_m.group(1))}, "every m the claims state is the page's or the report's"


#: Files too many-valued to vouch for a quoted decimal by themselves (a 3-digit number is found in them by chance):
#: the comparisons (quoted whole, checked apart), each run's every epoch and every profile bin (quoted through
#: their means, which the page's own tables hold).
BULK = ("comparisons.csv", "epochs.csv", "profile_bins.csv")


def folder_numbers(name: str) -> tuple[set[float], set[tuple[float, float]]]:
    """Every number of a study's committed CSVs, and every (mean, sample std) of a numeric column over a
    configuration's rows of its per-run CSVs (runs.csv and the scripts' per-run files) or of table.csv (those means
    and stds are numbers the page may quote too)."""
    numbers: set[float] = {stats.t.ppf(0.975, 2)}
    pairs: set[tuple[float, float]] = set()
    for path in sorted((DOCS / name).glob("*.csv")):
        found = rows(path)
        for row in found if path.name not in BULK else ():
            for cell in row.values():
                try:
                    numbers.add(abs(float(cell)))
                except (TypeError, ValueError):
                    numbers.update(float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell or ""))
        if path.name == "table.csv":
            for row in found:
                for key in [k.removesuffix("_mean") for k in row if k.endswith("_mean")]:
                    if row[f"{key}_mean"] and row[f"{key}_std"]:
                        pairs.add((float(row[f"{key}_mean"]), float(row[f"{key}_std"])))
        elif found and "configuration" in found[0] and "seed" in found[0] and path.name not in BULK:
            for label in {row["configuration"] for row in found}:
                mine = [row for row in found if row["configuration"] == label]
                for key in mine[0]:
                    try:
                        values = [float(row[key]) for row in mine]
                    except (TypeError, ValueError):
                        continue
                    if len(values) > 1:
                        pairs.add((statistics.fmean(values), statistics.stdev(values)))
                        numbers.update((abs(statistics.fmean(values)), statistics.stdev(values)))
    numbers.update(float(x) for x in re.findall(r"\d+\.\d+", (DOCS / "science.md").read_text(encoding="utf-8")))
    return numbers, pairs


@pytest.mark.parametrize("name", RERUN)
def test_every_number_a_rerun_page_quotes_is_recorded(name):
    """Each "mean ± std" of the page (setup and claims) is a configuration's mean and sample std of one column of
    its committed files; each other decimal of the claims (its quoted comparisons aside) rounds from a number of its
    own folder's files, bulk files aside (``BULK``)."""
    numbers, pairs = folder_numbers(name)
    text = " ".join((DOCS / f"{name}.md").read_text(encoding="utf-8").split())
    quoted = MEAN_STD.findall(text)
    assert len(quoted) >= 10
    missing = []
    for mean, sd in quoted:
        d = digits(mean)
        if not any(round(m, d) == pytest.approx(number(mean)) and round(s, digits(sd)) == pytest.approx(float(sd))
                   for m, s in pairs):  # fmt: skip
            missing.append(f"{mean} ± {sd}")
    assert missing == [], f"{name}.md quotes means ± stds no committed file gives: {missing}"
    missing = []
    for value in DECIMAL.findall(PAIRED_QUOTE.sub("", claims(name))):
        d = digits(value)
        if not any(abs(round(x, d) - float(value)) < 1e-9 for x in numbers):
            missing.append(value)
    assert missing == [], f"{name}.md quotes numbers its committed files do not record: {missing}"


@pytest.mark.parametrize("name", RERUN)
def test_a_rerun_page_shows_the_committed_tables(name):
    """The page's tables are the report's first tables (``table.md`` up to its paired section), line for line, with
    the legend that states the report's m."""
    page = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    table = (DOCS / name / "table.md").read_text(encoding="utf-8").split("### Paired")[0]
    lines = [line for line in table.splitlines() if line.startswith(("| ", "Marks in the accuracy columns"))]
    assert len(lines) >= 10 and any("Comparisons tested: m = " in line for line in lines)
    assert [line for line in lines if line not in page] == []


# --- docs/hardness_study: the profiles' slopes, refitted on the bins they name -----------------------------------


def weighted_slope(points: list[tuple[float, float, float]]) -> float:
    """Least-squares slope of y on x with weights w (numpy's polyfit with weights √w minimises the same sum)."""
    total = sum(w for _, _, w in points)
    mx = sum(w * x for x, _, w in points) / total
    my = sum(w * y for _, y, w in points) / total
    return sum(w * (x - mx) * (y - my) for x, y, w in points) / sum(w * (x - mx) ** 2 for x, _, w in points)


def test_hardness_slopes_are_refitted_on_the_bins_they_name():
    """Each run's two log-slopes are the weighted fit of ln(mean share) on s over the recorded bins they name (every
    bin with a share > 0; the upper bins s = 0.45–0.95, the same 6 for every run), its share ≤ 0 the recorded
    negatives' fraction; InfoNCE's is 1/τ = 2 up to the binning; the page shows the script's table and names the bins."""
    name = "hardness_study"
    bins = rows(DOCS / name / "profile_bins.csv")
    slopes = rows(DOCS / name / "profile_slopes.csv")
    assert len(slopes) == 21
    for run in slopes:
        mine = [b for b in bins if (b["configuration"], b["seed"]) == (run["configuration"], run["seed"])]
        points = [(float(b["s"]), float(b["mean_share"]), float(b["negatives"])) for b in mine]
        positive = [(s, math.log(w), n) for s, w, n in points if w > 0]
        named = (float(run["s_low"]), float(run["s_high"]), int(run["bins"]))
        assert (min(s for s, _, _ in positive), max(s for s, _, _ in positive), len(positive)) == named
        assert float(run["log_slope"]) == pytest.approx(weighted_slope(positive), rel=1e-6)
        upper = [p for p in positive if p[0] >= 0.45 - 1e-9]
        assert (float(run["upper_s_low"]), float(run["upper_s_high"]), int(run["upper_bins"])) == (0.45, 0.95, 6)
        assert len(upper) == 6
        assert float(run["upper_log_slope"]) == pytest.approx(weighted_slope(upper), rel=1e-6)
        dropped = sum(n for _, w, n in points if w <= 0) / sum(n for _, _, n in points)
        assert float(run["share_le_0"]) == pytest.approx(dropped, rel=1e-9, abs=1e-12)
        if run["configuration"] == "InfoNCE τ=0.5":
            assert float(run["log_slope"]) == pytest.approx(2.0, abs=0.05)
    page = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    summary = (DOCS / name / "profile_summary.md").read_text(encoding="utf-8").split("\n\n")[0]
    assert summary.strip() in page
    assert "s = 0.45–0.95" in claims(name)


# --- docs/tau_study: the path, run by run ------------------------------------------------------------------------


def test_tau_paths_follow_the_schedule_and_give_the_recorded_means():
    """Each cosine run's recorded τ is the schedule's at each epoch's last step (9 steps an epoch), each constant's
    its τ; the path table's means and the run averages are the recorded per-run epochs' means."""
    name = "tau_study"
    epochs = rows(DOCS / name / "epochs.csv")
    runs = {(r["configuration"], r["seed"]): r for r in rows(DOCS / name / "run_averages.csv")}
    assert len(runs) == 12 and len(epochs) == 12 * 12
    constants = {"InfoNCE τ=0.1": 0.1, "InfoNCE τ=0.5": 0.5, "InfoNCE τ=1": 1.0}
    for row in epochs:
        t = int(row["epoch"]) - 1 / 9
        expected = constants.get(row["configuration"], 0.1 + 0.9 * (1 + math.cos(2 * math.pi * t / 12)) / 2)
        assert float(row["tau"]) == pytest.approx(expected, abs=1e-6), row
    for (label, seed), run in runs.items():
        mine = [e for e in epochs if (e["configuration"], e["seed"]) == (label, seed)]
        for key in ("tau", "uniformity", "tolerance"):
            assert float(run[f"{key}_epoch_mean"]) == pytest.approx(statistics.fmean(float(e[key]) for e in mine), rel=1e-9)
    for mean in rows(DOCS / name / "epoch_means.csv"):
        at = [e for e in epochs if (e["configuration"], e["epoch"]) == (mean["configuration"], mean["epoch"])]
        assert len(at) == int(mean["n"]) == 3
        for key in ("tau", "uniformity", "tolerance", "knn_acc"):
            assert float(mean[key]) == pytest.approx(statistics.fmean(float(e[key]) for e in at), rel=1e-9)
    cosine = {int(m["epoch"]): m for m in rows(DOCS / name / "epoch_means.csv") if "cosine" in m["configuration"]}
    text = claims(name)

    def at(key: str, epochs_quoted: list[int], digits: int = 3) -> str:
        return ", ".join(f"{float(cosine[e][key]):.{digits}f}" for e in epochs_quoted)

    # the path's numbers as the claims quote them, epoch by epoch
    assert f"went {at('tau', [1])} → {at('tau', [6])} (epoch 6) → {at('tau', [12])} (epoch 12)" in text
    assert f"last three epochs ran at τ {at('tau', [10, 11, 12])})" in text
    assert f"(epochs 5–7, τ {at('tau', [5, 6, 7])})" in text
    assert f"mean uniformity fell to {at('uniformity', [5, 6, 7])} and their mean tolerance rose to" in text
    assert f"rose to {at('tolerance', [5, 6, 7])} (" in text
    assert f"mean uniformity {at('uniformity', [8])} at epoch 8, {at('uniformity', [9])} at epoch 9" in text
    last = {(e["configuration"], e["seed"]): e for e in epochs if e["epoch"] == "12"}
    for row in rows(DOCS / name / "runs.csv"):  # the path's last epoch is the table's final value
        for key in ("uniformity", "tolerance", "knn_acc"):
            assert float(last[(row["configuration"], row["seed"])][key]) == pytest.approx(float(row[key]), rel=1e-6)


def test_tau_report_paired_section_is_the_pages_comparisons_against_the_cosine():
    """The report's ★ is the cosine (the highest mean kNN); its paired section gives, for each constant, the Δ and
    interval the page's comparisons give (their sign turned: the report's Δ is row − ★, the page's cosine − constant)."""
    name = "tau_study"
    found = {(r["metric"], r["a"], r["b"]): r for r in rows(DOCS / name / "comparisons.csv")}
    table = rows(DOCS / name / "table.csv")
    star = [r["configuration"] for r in table if r["paired_reference"] == "1"]
    assert star == ["InfoNCE τ=cosine:0.1-1:T=12"]
    checked = 0
    for row in table:
        for metric, a, b in found:
            if (a, b) != (star[0], row["configuration"]) or not row.get(f"{metric}_paired_delta"):
                continue
            mine = found[(metric, a, b)]
            assert float(row[f"{metric}_paired_delta"]) == pytest.approx(-float(mine["delta"]), rel=1e-9, abs=1e-12)
            assert float(row[f"{metric}_paired_low"]) == pytest.approx(-float(mine["high"]), rel=1e-7, abs=1e-9)
            assert float(row[f"{metric}_paired_high"]) == pytest.approx(-float(mine["low"]), rel=1e-7, abs=1e-9)
            checked += 1
    assert checked == 3 * 9


# --- docs/study: the linear evaluations' times, and a within-run comparison ------------------------------------

#: "18 to 47 s a linear evaluation (median 25 s)": the probes' wall time, from the run records
LINEAR_TIMES = re.compile(r"(\d+) to (\d+) s a linear evaluation \(median (\d+(?:\.\d+)?) s\)")
#: "the top-10 negative similarity lies above the positive similarity in 30 of the 30 runs"
ABOVE_POSITIVE = re.compile(r"top-10 negative similarity lies above the positive similarity in (\d+) of the (\d+) runs")


def test_study_records_every_fit_and_its_linear_evaluation():
    """Each of the study's 30 fits has its linear evaluation (``evaluations/linear_0``), every record ended done, and
    the probes' times the page states are theirs (fastest, slowest, median)."""
    found = rows(DOCS / "study" / "fits.csv")
    fits = {row["run"] for row in found if row["kind"] == "fit"}
    probes = [row for row in found if row["kind"] == "linear"]
    assert len(fits) == 30 and {row["run"] for row in probes} == {f"{fit}/evaluations/linear_0" for fit in fits}
    assert {row["status"] for row in found} == {"done"}
    assert {row["run"] for row in rows(DOCS / "study" / "runs.csv")} == fits
    seconds = [float(row["seconds"]) for row in probes]
    page = " ".join((DOCS / "study.md").read_text(encoding="utf-8").split())
    stated = LINEAR_TIMES.search(page)
    assert stated, "study.md states no linear evaluation times"
    assert (int(stated.group(1)), int(stated.group(2))) == (round(min(seconds)), round(max(seconds)))
    assert stated.group(3) == f"{statistics.median(seconds):g}"


def test_study_counts_the_runs_whose_hardest_negatives_beat_the_positive():
    """The page's count of runs whose top-10 negative similarity exceeds their positive similarity (both on the two
    augmented views of the same images, so a within-run difference) is the recorded runs' count."""
    seeds = rows(DOCS / "study" / "runs.csv")
    above = sum(float(row["top10_neg_sim"]) > float(row["pos_sim"]) for row in seeds)
    stated = ABOVE_POSITIVE.search(claims("study"))
    assert stated, "study.md states no count of runs with the hardest negatives above the positive"
    assert (int(stated.group(1)), int(stated.group(2))) == (above, len(seeds))


def test_study_page_shows_every_seed_beside_the_table():
    """The per-seed table on the page holds, for every configuration, each seed's recorded value of the four headline
    metrics (runs.csv, rounded as the report rounds them), in seed order: the seeds the table's means come from."""
    family = paired_studies().FAMILIES["study"]
    found = rows(DOCS / "study" / "runs.csv")
    page = (DOCS / "study.md").read_text(encoding="utf-8")
    table = [line.strip("| ").split(" | ") for line in page.splitlines() if line.startswith("| ")]
    shown = {cells[0]: cells[1:] for cells in table if len(cells) == 6 and ", " in cells[1]}
    labels = dict.fromkeys(row["configuration"] for row in found)
    assert len(labels) == 10 and set(shown) == set(labels)
    for label in labels:
        mine = sorted((row for row in found if row["configuration"] == label), key=lambda row: int(row["seed"]))
        assert [row["seed"] for row in mine] == ["0", "1", "2"]
        cells = shown[label]
        assert cells[0] == "0, 1, 2"
        for (key, _), cell in zip(family.seed_table, cells[1:], strict=True):
            d = 2 if key in ("linear_top1", "knn_acc") else 3
            assert [float(x) for x in cell.split(", ")] == [round(float(row[key]), d) for row in mine], (label, key)
