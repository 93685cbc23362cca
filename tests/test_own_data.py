"""Your own data through the command line: any CSV, categorical or continuous, and one line with
exit code 2 for everything that cannot work."""

import json

import numpy as np
import pytest

from sim.cli import main
from sim.datasets import load_dataset


def run(*args):
    """``python -m sim`` in process: (exit code, stdout, stderr)."""
    return main([*map(str, args)])


def refused(capsys, *args, words=()):
    with pytest.raises(SystemExit) as exit:
        main([*map(str, args)])
    err = capsys.readouterr().err
    assert exit.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "error:" in last, err
    for word in words:
        assert word in last, last
    return last


def categorical_rows(m=600, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.choice(["yes", "no"], m)
    colour = np.where(rng.random(m) < 0.8, np.where(y == "yes", "red", "blue"), rng.choice(["red", "blue", "green"], m))
    size = rng.choice(["big, heavy", "small"], m)  # a comma inside a quoted field
    return colour, size, y


def write(path, header, rows, sep=",", bom=False):
    text = sep.join(header) + "\n" if header else ""
    text += "".join(sep.join(f'"{v}"' if "," in v else v for v in row) + "\n" for row in rows)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


@pytest.mark.parametrize("sep, bom", [(",", True), (";", False), ("\t", False)])
def test_categorical_csvs_with_quotes_bom_and_other_separators(tmp_path, capsys, sep, bom):
    colour, size, y = categorical_rows()
    path = write(tmp_path / "survey.csv", ["colour", "size", "outcome"], zip(colour, size, y), sep, bom)
    assert run("--csv", path, "--label", "outcome", "--eps", 4, "--reps", 2, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["accuracy_mean"] > 0.7 and out["nonprivate_mean"] > 0.8


def test_missing_values_are_dropped_and_counted_or_kept(tmp_path, capsys):
    colour, size, y = categorical_rows()
    colour[:10] = ""
    colour[10:15] = "?"
    path = write(tmp_path / "gaps.csv", ["colour", "size", "outcome"], zip(colour, size, y))
    assert run("--csv", path, "--label", "outcome", "--reps", 1) == 0
    assert "dropped 15 rows with missing values" in capsys.readouterr().err
    assert run("--csv", path, "--label", "outcome", "--reps", 1, "--missing", "category") == 0
    assert "15 rows have missing values, kept" in capsys.readouterr().err


def test_an_id_column_is_flagged_and_can_be_dropped(tmp_path, capsys):
    colour, size, y = categorical_rows()
    ids = [f"p{i:05d}" for i in range(len(y))]
    path = write(tmp_path / "ids.csv", ["id", "colour", "size", "outcome"], zip(ids, colour, size, y))
    assert run("--csv", path, "--label", "outcome", "--reps", 1) == 0
    assert "column 'id' is unique per row" in capsys.readouterr().err
    assert run("--csv", path, "--label", "outcome", "--reps", 1, "--drop", "id", "--json") == 0
    captured = capsys.readouterr()
    assert "unique per row" not in captured.err
    # A mistyped column: the closest named, else every column (issue 81).
    refused(capsys, "--csv", path, "--label", "outcome", "--drop", "ID", words=["--drop 'ID': no such column; did you mean 'id'?"])
    refused(capsys, "--csv", path, "--label", "outcome", "--drop", "zzz", words=[
        "--drop 'zzz': no such column; the file has 4 columns: 'id', 'colour', 'size', 'outcome'",
    ])  # fmt: skip


def test_a_protocol_is_named_whatever_its_case(capsys):
    assert run("--dataset", "car", "--protocol", "oue", "--reps", 1, "--mode", "fast", "--json") == 0
    assert json.loads(capsys.readouterr().out)["protocol"] == "OUE"
    refused(capsys, "--dataset", "car", "--protocol", "ou", words=["invalid choice: 'ou'", "did you mean 'OUE'?"])


def test_a_headerless_continuous_file_with_declared_ranges(tmp_path, capsys):
    rng = np.random.default_rng(1)
    m = 1500
    y = rng.integers(0, 2, m)
    X = rng.normal(0, 1, (m, 4)) + 1.5 * y[:, None]
    rows = [[f"{v:.4f}" for v in x] + [str(c)] for x, c in zip(X, y)]
    path = write(tmp_path / "banknote.csv", None, rows)
    ranges = [f"--range={j}=-4:6" for j in range(4)]
    for model in (["--model", "discrete", "--bins", "4"], ["--model", "gaussian"]):
        assert run("--csv", path, "--no-header", "--label", 4, *ranges, *model, "--eps", 4, "--reps", 2, "--json") == 0
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        assert "numeric columns detected" not in captured.err  # declared by their ranges
        assert out["nonprivate_mean"] > 0.8 and out["accuracy_mean"] > 0.75, out
    # Without declared ranges: refused, unless ranges from the data are asked for (and warned).
    refused(capsys, "--csv", path, "--no-header", "--label", 4, words=[
        "4 numeric columns need a declared range each: '0', '1', '2', '3';", "--range 0=LO:HI", "--ranges FILE",
    ])  # fmt: skip
    # One declared, by a pattern or a file: the rest are named, and only they.
    (tmp_path / "ranges.txt").write_text("# declared beforehand\n0=-4:6\n")
    refused(capsys, "--csv", path, "--no-header", "--label", 4, "--ranges", tmp_path / "ranges.txt", words=[
        "3 numeric columns need a declared range each: '1', '2', '3';", "--range 1=LO:HI",
    ])  # fmt: skip
    ranges_file = tmp_path / "all.txt"
    ranges_file.write_text("".join(f"{j}=-4:6\n" for j in range(4)))
    assert run("--csv", path, "--no-header", "--label", 4, "--ranges", ranges_file, "--reps", 1, "--mode", "fast") == 0
    assert run("--csv", path, "--no-header", "--label", 4, "--ranges-from-data", "--reps", 1) == 0
    assert "leaks information about them" in capsys.readouterr().err
    # --label 2 is the third column by position, not a column headed "2".
    refused(capsys, "--csv", path, "--no-header", "--label", 9, words=["no column '9'", "positions 0 to 4"])


def test_declared_ranges_are_kept_as_declared_and_explain_themselves(tmp_path, capsys):
    """A range narrower than the data stays as declared (widening it to the data's min and max
    would leak the surveyed people's extremes) and the share it clips is said; a range makes its
    column numeric, and a range or --numeric on a column of words is refused in one line."""
    from aggregator.operator.csvdata import CSVOptions, read_csv

    rng = np.random.default_rng(4)
    m = 800
    y = rng.integers(0, 2, m)
    income = rng.normal(50, 20, m) + 10 * y  # about 31 % above 60, 0.3 % below 0
    age = rng.integers(18, 30, m)  # 12 distinct values: detected as categorical without a range
    rows = [[f"{a}", f"{v:.2f}", str(c)] for a, v, c in zip(age, income, y)]
    path = write(tmp_path / "people.csv", ["age", "income", "class"], rows)
    options = CSVOptions(label="class", ranges={"income": (0.0, 60.0), "age": (18.0, 99.0)})
    table, notes = read_csv(path, options)
    assert table.ranges == ((18.0, 99.0), (0.0, 60.0))  # as declared, in column order, never widened
    above = np.mean((income < 0) | (income > 60))
    assert f"warning: {above:.1%} of 'income' lies outside its declared range 0:60 and is clipped" in "\n".join(notes)
    assert not any("'age' lies outside" in n for n in notes)
    assert table.X.dtype == float  # the range made 'age' numeric
    # --numeric adds to detection: 'income' (many distinct numbers) is still found beside 'age'.
    table, notes = read_csv(path, CSVOptions(label="class", numeric=("age",), ranges_from_data=True))
    assert table.feature_names == ("age", "income") and table.X.dtype == float
    words = write(tmp_path / "words.csv", ["colour", "class"], [[c, k] for c, k in zip(["red", "blue"] * 50, "ab" * 50)])
    refused(capsys, "--csv", words, "--label", "class", "--range", "colour=0:1", words=["'red' is not a number"])
    refused(capsys, "--csv", words, "--label", "class", "--range", "size=0:1", words=["no such feature column"])
    from aggregator.operator.cli import main as aggregator

    assert aggregator(["spec", "--csv", str(path), "--label", "class", "--categorical", "age,income"]) == 0
    capsys.readouterr()
    # A range that excludes every value: said, and no numpy warnings from the clipped data's zero variance.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        far = ["--range", "income=1000:2000", "--range", "age=100:200", "--model", "gaussian", "--reps", 1]
        assert run("--csv", path, "--label", "class", *far) == 0
    assert "100.0% of 'income' lies outside" in capsys.readouterr().err


def test_australian_through_csv_gives_the_built_in_numbers(tmp_path, capsys):
    data = load_dataset("australian", download=False)
    rows = [[repr(float(v)) for v in x] + [c] for x, c in zip(data.X, data.y)]
    path = write(tmp_path / "australian.csv", [*data.feature_names, "class"], rows)
    names = ",".join(data.feature_names)
    ranges = [f"--range={n}={lo}:{hi}" for n, (lo, hi) in zip(data.feature_names, data.ranges)]
    common = ["--protocol", "DE", "--eps", 1, "--reps", 3, "--reduce", "dca", "--json"]
    assert run("--dataset", "australian", *common) == 0
    built_in = json.loads(capsys.readouterr().out)
    assert run("--csv", path, "--label", "class", "--numeric", names, *ranges, *common) == 0
    mine = json.loads(capsys.readouterr().out)
    for key in ("accuracy_mean", "accuracy_std", "nonprivate_mean", "n_train"):
        assert mine[key] == built_in[key], key


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LDPNB_ADMIN_TOKEN", "some-admin-token-0123456789")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    refused(capsys, "--csv", empty, "--label", "y", words=["is empty"])
    header_only = write(tmp_path / "header.csv", ["a", "y"], [])
    refused(capsys, "--csv", header_only, "--label", "y", words=["no rows"])
    one_class = write(tmp_path / "one.csv", ["a", "y"], [["x", "same"], ["z", "same"]] * 20)
    refused(capsys, "--csv", one_class, "--label", "y", words=["single value"])
    colour, size, y = categorical_rows()
    good = write(tmp_path / "good.csv", ["colour", "size", "outcome"], zip(colour, size, y))
    refused(capsys, "--csv", good, "--label", "outcome", "--protocol", "THE", "--theta", 5, words=["--theta"])
    for eps in (0, 709, 710, 1e308):
        refused(capsys, "--csv", good, "--label", "outcome", "--eps", eps, words=["--eps"])
    refused(capsys, "--dataset", "car", "--label", "x", words=["--label applies to --csv"])
    refused(capsys, "--dataset", "car", "--data-dir", tmp_path / "nowhere", words=["no such folder"])
    refused(capsys, "--csv", good, "--label", "outcome", "--model", "gaussian", words=["is categorical"])
    refused(capsys, "--csv", good, "--label", "outcome", "--bins", 3, words=["is categorical"])
    refused(capsys, "--csv", good, "--label", "outcome", "--range", "colour=oops", words=["COL=LO:HI"])
    refused(
        capsys, "--csv", good, "--label", "outcome", "--via", "http", "--aggregator", "http://127.0.0.1:9",
        "--reps", 1, words=["cannot use the aggregator"],
    )  # fmt: skip
    tiny = write(tmp_path / "tiny.csv", ["a", "y"], [["x", "p"], ["z", "q"], ["x", "q"], ["z", "p"], ["x", "p"]])
    assert run("--csv", tiny, "--label", "y", "--reps", 1) == 0
    assert "mostly noise" in capsys.readouterr().err


def test_sweep_and_compare_take_csv_files(tmp_path, capsys, monkeypatch):
    """Two files with different columns, each naming its own class column (and one an id column
    to drop), one by an absolute and one by a relative path: every output lands under --out, one
    plot per data set and estimator, named by the file."""
    colour, size, y = categorical_rows()
    data = tmp_path / "data"
    data.mkdir()
    first = write(data / "first.csv", ["colour", "size", "outcome"], zip(colour, size, y))
    ids = [str(i) for i in range(len(y))]
    write(data / "second.csv", ["id", "verdict", "shade"], zip(ids, *reversed(categorical_rows(seed=5)[::2])))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results" / "mine"
    args = ["sweep", "--csv", f"{first}:outcome", "--csv", "data/second.csv:verdict:id", "--protocols", "DE,OUE"]
    assert run(*args, "--eps", "1,4", "--estimators", "paper,normsub", "--reps", 2, "--out", "results/mine", "--jobs", 1) == 0
    import csv

    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert {r["dataset"] for r in rows} == {"first", "second"} and len(rows) == 2 * 2 * 2 * 2 * 2
    plots = {p.name for p in out.glob("*.png")}
    assert plots == {f"{d}-discrete-one-report-{e}.png" for d in ("first", "second") for e in ("paper", "normsub")}
    assert sorted(p.name for p in data.iterdir()) == ["first.csv", "second.csv"]  # nothing beside the input
    assert not (tmp_path / "results" / "mine" / "data").exists()
    assert run("compare", "--csv", f"{first}:outcome", "--eps", "1,4", "--reps", 2, "--out", "results/cmp") == 0
    assert "first: mean accuracy over 2 splits" in capsys.readouterr().out
    assert (tmp_path / "results" / "cmp" / "compare-first.png").exists()
    refused(capsys, "sweep", "--datasets", "file.csv", "--out", out, words=["unknown value 'file.csv'", "--csv FILE"])
    refused(capsys, "sweep", "--csv", tmp_path / "nope.csv", "--label", "y", "--out", out, words=["does not exist"])
    refused(capsys, "sweep", "--csv", first, "--out", out, words=["--csv FILE:COLUMN"])
    refused(capsys, "sweep", "--csv", "data/second.csv:verdict", "--out", out, "--eps", 1, words=["id"])


def test_one_spec_format_drafted_from_a_sample_and_run_by_the_simulator(tmp_path, capsys):
    from aggregator.operator.cli import main as aggregator

    colour, size, y = categorical_rows()
    sample = write(tmp_path / "sample.csv", ["colour", "size", "outcome"], zip(colour[:100], size[:100], y[:100]))
    data = write(tmp_path / "data.csv", ["colour", "size", "outcome"], zip(colour, size, y))
    spec_path = tmp_path / "spec.json"
    args = ["spec", "--csv", str(sample), "--label", "outcome", "--protocol", "OUE", "--eps", "4", "--out", str(spec_path)]
    assert aggregator(args) == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "categories come from the sample" in err and "epsilon=4-LDP per person" in err
    spec = json.loads(spec_path.read_text())
    assert spec["protocol"] == "OUE" and [f["name"] for f in spec["features"]] == ["colour", "size"]
    assert run("--spec", spec_path, "--csv", data, "--reps", 3, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["eps_per_person"] == 4.0 and out["accuracy_mean"] > 0.7
    # A value the spec does not declare: one line.
    write(tmp_path / "odd.csv", ["colour", "size", "outcome"], [["purple", "small", "yes"]] + list(zip(colour, size, y)))
    refused(capsys, "--spec", spec_path, "--csv", tmp_path / "odd.csv", words=["do not fit the spec", "purple", "--skip-unknown"])
    # ... or, asked, counted and skipped.
    assert run("--spec", spec_path, "--csv", tmp_path / "odd.csv", "--reps", 2, "--skip-unknown", "--json") == 0
    out, err = capsys.readouterr()
    assert "skipped 1 of 601 rows holding a value the spec does not declare (first: column 'colour', 'purple')" in err
    assert json.loads(out)["n_train"] == 480
    refused(capsys, "--dataset", "car", "--skip-unknown", words=["--skip-unknown goes with --spec"])
    # An option that would read the file otherwise than the spec declares: refused, naming both.
    refused(capsys, "--spec", spec_path, "--csv", data, "--label", "size",
            words=[f"--label size conflicts with --spec {spec_path}, whose class column is 'outcome'"])  # fmt: skip
    refused(capsys, "--spec", spec_path, "--csv", data, "--categorical", "colour", words=["--categorical conflicts"])
    # A value the sample shows once: the draft says what share of records such values suggest it missed.
    once = write(tmp_path / "once.csv", ["colour", "size", "outcome"], [["purple", "small", "yes"]] + list(zip(colour[:99], size[:99], y[:99])))
    assert aggregator(["spec", "--csv", str(once), "--label", "outcome", "--out", str(tmp_path / "once.json")]) == 0
    err = capsys.readouterr().err
    assert "column 'colour': 1 value(s) appear once in the sample ('purple'): by Good-Turing about 1.0% of other" in err
    assert "the class:" not in err  # both classes appear many times
    # Continuous: the spec's declared ranges read the CSV's numeric columns.
    rng = np.random.default_rng(2)
    z = rng.integers(0, 2, 800)
    rows = [[f"{v:.3f}" for v in rng.normal(2 * c, 1, 2)] + [f"c{c}"] for c in z]
    numeric = write(tmp_path / "numeric.csv", ["a", "b", "class"], rows)
    args = ["spec", "--csv", str(numeric), "--label", "class", "--range", "a=-3:5", "--range", "b=-3:5", "--model", "gaussian"]
    assert aggregator([*args, "--out", str(spec_path)]) == 0
    assert "wrote the spec" in capsys.readouterr().out
    assert run("--spec", spec_path, "--csv", numeric, "--reps", 2, "--json") == 0
    assert json.loads(capsys.readouterr().out)["nonprivate_mean"] > 0.8
    with pytest.raises(SystemExit) as exit:  # numeric columns without declared ranges
        aggregator(["spec", "--csv", str(numeric), "--label", "class"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "2 numeric columns need a declared range each: 'a', 'b';" in err and "--ranges FILE" in err


def test_a_drafted_spec_states_a_class_share_and_uneven_samples_are_told_of_it(tmp_path, capsys):
    from aggregator.operator.cli import main as aggregator

    colour, size, _ = categorical_rows(200)
    y = ["no"] * 150 + ["yes"] * 50  # 75 % one class
    sample = write(tmp_path / "sample.csv", ["colour", "size", "outcome"], zip(colour, size, y))
    spec_path = tmp_path / "spec.json"
    base = ["spec", "--csv", str(sample), "--label", "outcome", "--eps", "0.5", "--out", str(spec_path)]
    assert aggregator(base) == 0
    assert "75% of the sample is 'no'" in capsys.readouterr().err and "class_share" not in spec_path.read_text()
    assert aggregator([*base, "--class-share", "0.4"]) == 0
    assert "of the sample is" not in capsys.readouterr().err
    assert json.loads(spec_path.read_text())["class_share"] == 0.4
    with pytest.raises(SystemExit) as stop:
        aggregator([*base, "--class-share", "1.5"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--class-share: must lie in (0, 1), got 1.5" in err and "Traceback" not in err
    even = write(tmp_path / "even.csv", ["colour", "size", "outcome"], zip(colour, size, ["no", "yes"] * 100))
    assert aggregator(["spec", "--csv", str(even), "--label", "outcome", "--out", str(spec_path)]) == 0
    assert "of the sample is" not in capsys.readouterr().err


def test_a_drafted_spec_says_how_surely_the_expected_people_will_name_the_most_common_class(tmp_path, capsys):
    """With --people the draft's notes give the planner's odds and cost for the sample's class
    shares (``aggregator.estimation.planning``, checked against exact collections in tests/test_planning.py),
    and the class share that would keep the cost within 0.005, where there is one."""
    from aggregator.estimation.planning import majority_outlook
    from aggregator.operator.cli import main as aggregator
    from aggregator.operator.specdraft import share_text
    from participant import CollectionSpec

    colour, size, _ = categorical_rows(200)
    sample = write(tmp_path / "sample.csv", ["colour", "size", "outcome"], zip(colour, size, ["no"] * 150 + ["yes"] * 50))
    spec_path = tmp_path / "spec.json"
    base = ["spec", "--csv", str(sample), "--label", "outcome", "--eps", "0.5", "--out", str(spec_path)]
    assert aggregator([*base, "--people", "450"]) == 0
    err = capsys.readouterr().err
    spec = CollectionSpec.from_json(spec_path.read_text())
    planned = majority_outlook(spec, [0.75, 0.25], 450)
    assert 0.02 < planned.wrong < 0.05 and "of the sample is" not in err
    assert (
        f"with 450 people the reports would name another class than 'no' the most common in {share_text(planned.wrong)} "
        f"of collections, costing the class prior alone {planned.cost:.3f} accuracy on average"
    ) in err
    assert "--class-share 0.75 would make it 0.9% (0.004), at the features' expense" in err
    assert aggregator([*base, "--people", "450", "--class-share", "0.75"]) == 0
    assert "0.9% of collections, costing the class prior alone 0.004" in (err := capsys.readouterr().err)
    assert "would make it" not in err
    assert aggregator([*base, "--people", "100"]) == 0
    assert "to keep it within 0.005, more people or a larger --eps" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        aggregator([*base, "--people", "0"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--people: must be at least 1, got 0" in err and "Traceback" not in err
    rng = np.random.default_rng(2)
    rows = [[f"{v:.3f}" for v in rng.normal(2 * c, 1, 2)] + [f"c{c}"] for c in rng.integers(0, 2, 200)]
    numeric = write(tmp_path / "numeric.csv", ["a", "b", "class"], rows)
    gaussian = ["spec", "--csv", str(numeric), "--label", "class", "--range", "a=-3:5", "--range", "b=-3:5"]
    assert aggregator([*gaussian, "--model", "gaussian", "--people", "300", "--out", str(spec_path)]) == 0
    # A gaussian spec's class counts come from its class input alone: one report in five here.
    assert "with 300 people the reports would name another class than" in capsys.readouterr().err
    assert aggregator([*gaussian, "--people", "300", "--out", str(spec_path)]) == 0  # binned: forecast
    assert "with 300 people the reports would name another class than" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["car", "australian"])
def test_the_built_in_data_sets_ship_their_specs(name, capsys):
    from pathlib import Path

    spec = Path(__file__).resolve().parents[1] / "sim" / "specs" / f"{name}.json"
    assert run("--spec", spec, "--dataset", name, "--reps", 3, "--json", "--log-loss") == 0
    with_spec = json.loads(capsys.readouterr().out)
    assert run("--dataset", name, "--reps", 3, "--json", "--log-loss") == 0
    built_in = json.loads(capsys.readouterr().out)
    assert with_spec["accuracy_mean"] == built_in["accuracy_mean"] and with_spec["eps_per_person"] == 1.0
    assert with_spec["log_loss_mean"] == built_in["log_loss_mean"] < built_in["prior_log_loss_mean"] + 0.2


def test_a_categorical_spec_reads_a_column_of_many_numbers_as_categories(tmp_path, capsys):
    """Ages 20-49 as 30 categories: detection would take the column as numeric (over 20 distinct
    numbers) and ask for a range; the spec says it is categorical, and the simulator reads it so."""
    from participant import CollectionSpec, Feature

    rng = np.random.default_rng(0)
    age = rng.integers(20, 50, 400)
    path = write(tmp_path / "ages.csv", ["age", "class"], [[str(a), "old" if a > 35 else "young"] for a in age])
    spec = CollectionSpec([Feature("age", [str(a) for a in range(20, 50)])], ["old", "young"], "DE", 4.0)
    (tmp_path / "ages.json").write_text(spec.to_json())
    assert run("--spec", tmp_path / "ages.json", "--csv", path, "--label", "class", "--reps", 1, "--json") == 0
    assert json.loads(capsys.readouterr().out)["accuracy_mean"] > 0.8


def test_ranges_by_pattern_list_or_file(tmp_path, capsys):
    """Ten numeric columns declared by one pattern, by a comma list, or by a file: the same
    ranges; a column's own name wins over a pattern; a pattern matching nothing is one line."""
    from aggregator.operator.cli import main as aggregator

    rng = np.random.default_rng(3)
    z = rng.integers(0, 2, 400)
    header = [f"x{i}" for i in range(10)] + ["class"]
    rows = [[f"{v:.3f}" for v in rng.uniform(0, 1, 10) * (1 + c)] + [f"c{c}"] for c in z]
    data = write(tmp_path / "wide.csv", header, rows)
    ranges_file = tmp_path / "ranges.txt"
    ranges_file.write_text("# every x but x0\nx*=0:2\nx0=0:3  # its own\n")
    drafts = {
        "pattern": ["--range", "x*=0:2", "--range", "x0=0:3"],
        "list": ["--range", ",".join(f"x{i}=0:{3 if i == 0 else 2}" for i in range(10))],
        "file": ["--ranges", str(ranges_file)],
    }
    specs = {}
    for name, extra in drafts.items():
        out = tmp_path / f"{name}.json"
        args = ["spec", "--csv", str(data), "--label", "class", "--model", "gaussian", *extra, "--out", str(out)]
        assert aggregator(args) == 0, capsys.readouterr().err
        specs[name] = json.loads(out.read_text())["continuous"]
    assert specs["pattern"] == specs["list"] == specs["file"]
    inputs = specs["pattern"]["inputs"]
    assert [(f["low"], f["high"]) for f in inputs] == [(0.0, 3.0)] + [(0.0, 2.0)] * 9
    capsys.readouterr()
    refused(capsys, "--csv", data, "--label", "class", "--range", "y*=0:1", words=["--range y*=...: no such feature column"])
    assert run("--csv", data, "--label", "class", "--range", "x*=0:2", "--reps", 1, "--mode", "fast", "--json") == 0
    assert json.loads(capsys.readouterr().out)["nonprivate_mean"] > 0.6


@pytest.mark.parametrize("sep, shown", [(";", "--sep ';'"), ("\t", "--sep $'\\t'"), ("|", "--sep '|'")])
def test_a_wrong_separator_is_named_with_the_one_the_header_holds(tmp_path, capsys, sep, shown):
    colour, _, y = categorical_rows()
    path = write(tmp_path / "other.csv", ["colour", "outcome"], zip(colour, y), sep=sep)
    refused(capsys, "--csv", path, "--label", "outcome", "--sep", ",", words=["no column 'outcome'", f"is it the separator? pass {shown}"])
    assert run("--csv", path, "--label", "outcome", "--sep", sep, "--reps", 1) == 0


def test_a_mistyped_label_names_the_closest_column(tmp_path, capsys):
    colour, _, y = categorical_rows()
    path = write(tmp_path / "ok.csv", ["colour", "outcome"], zip(colour, y))
    refused(capsys, "--csv", path, "--label", "outcom", words=["no column 'outcom'", "did you mean 'outcome'?"])
    with pytest.raises(SystemExit):
        main(["--csv", str(path), "--label", "zzz"])
    err = capsys.readouterr().err
    assert "no column 'zzz'" in err and "did you mean" not in err, err
