import json
from pathlib import Path

import numpy as np
import pytest

from aggregator.operator.csvdata import CSVOptions, DataError, read_csv
from sim.cli import main
from sim.datasets import DatasetInfo, DatasetNotFound, find_data_file, load_dataset
from sim.experiment import run_once

from .inprocess import run_main

# Row and class counts from ../shared/datasets/README.md.
EXPECTED = {
    "car": (1728, 6, {"unacc": 1210, "acc": 384, "good": 69, "vgood": 65}),
    "chess": (3196, 36, {"won": 1669, "nowin": 1527}),
    "mushroom": (8124, 22, {"e": 4208, "p": 3916}),
    "connect-4": (67557, 42, {"win": 44473, "loss": 16635, "draw": 6449}),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_datasets_parse_as_their_readme_says(name):
    rows, features, classes = EXPECTED[name]
    data = load_dataset(name, download=False)
    assert data.X.shape == (rows, features)
    values, counts = np.unique(data.y.astype(str), return_counts=True)
    assert dict(zip(values.tolist(), counts.tolist())) == classes


def test_mushroom_label_is_the_first_column_and_missing_is_a_category():
    data = load_dataset("mushroom", download=False)
    assert data.label_name == "class"
    assert data.feature_names[0] == "cap-shape"
    stalk_root = data.feature_names.index("stalk-root")
    assert (data.X[:, stalk_root] == "?").sum() == 2480


def test_a_missing_file_says_where_it_looked_and_how_to_fix_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LDPNB_DATA", str(tmp_path / "env"))
    info = DatasetInfo("nothing", "nothing.data", ("a", "class"), -1, url=None)
    with pytest.raises(DatasetNotFound) as err:
        find_data_file(info, tmp_path / "given")
    message = str(err.value)
    assert str(tmp_path / "given") in message and str(tmp_path / "env") in message
    assert "--data-dir" in message and "LDPNB_DATA" in message


def test_csv_with_a_header_row(tmp_path):
    path = tmp_path / "survey.csv"
    path.write_text("colour,size,outcome\nred,big,yes\nblue,small,no\nred,small,yes\n")
    data, _ = read_csv(path, CSVOptions("outcome"))
    assert data.feature_names == ("colour", "size")
    assert data.X.tolist() == [["red", "big"], ["blue", "small"], ["red", "small"]]
    assert sorted(set(data.y)) == ["no", "yes"]
    with pytest.raises(DataError, match="no column 'label'"):
        read_csv(path, CSVOptions("label"))


def test_runs_are_deterministic_given_the_seed():
    data = load_dataset("car", download=False)
    a = run_once(data, "OUE", 1.0, seed=3, estimators=("paper", "normsub"))
    b = run_once(data, "OUE", 1.0, seed=3, estimators=("paper", "normsub"))
    assert a.accuracy == b.accuracy
    assert a.n_train == 1382


def test_large_epsilon_approaches_non_private_accuracy():
    data = load_dataset("car", download=False)
    runs = [run_once(data, "DE", 20.0, seed=s, estimators=("normsub",)) for s in range(5)]
    private = np.mean([r.accuracy["normsub"] for r in runs])
    nonprivate = np.mean([r.nonprivate_accuracy for r in runs])
    # Each input is estimated from ~1/7 of the people, so a small gap remains even without noise.
    assert private > nonprivate - 0.06


def test_cli_json_has_the_documented_fields(capsys):
    assert main(["--dataset", "car", "--protocol", "OUE", "--eps", "1", "--reps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for field in (
        "dataset",
        "protocol",
        "eps",
        "reps",
        "estimator",
        "accuracy_mean",
        "accuracy_std",
        "nonprivate_mean",
    ):
        assert field in out
    assert (out["dataset"], out["protocol"], out["eps"], out["reps"], out["estimator"]) == (
        "car",
        "OUE",
        1.0,
        3,
        "normsub",
    )
    assert out["eps_per_person"] == 1.0 and out["reports_per_person"] == 1
    assert 0.8 < out["nonprivate_mean"] < 0.9


def test_cli_orientation_figures():
    # The orientation: car/OUE/ε=1 near 0.55, mushroom/DE/ε=1 near 0.86 (paper estimator),
    # 10 repetitions (the mean's sd is about 0.02 and 0.013). Car's majority class is 0.700 of the
    # rows, so a model reduced to the prior would score about that: the band around 0.55 excludes
    # it, and at ε = 4 with the default estimator the model must beat it.
    for dataset, protocol, low, high in (("car", "OUE", 0.48, 0.66), ("mushroom", "DE", 0.80, 0.92)):
        data = load_dataset(dataset, download=False)
        acc = np.mean([run_once(data, protocol, 1.0, seed=s).accuracy["paper"] for s in range(10)])
        assert low < acc < high, (dataset, acc)
    car = load_dataset("car", download=False)
    majority = max(np.mean(car.y == c) for c in np.unique(car.y))
    assert majority == pytest.approx(0.700, abs=0.001)
    acc = np.mean([run_once(car, "OUE", 4.0, seed=s, estimators=("normsub",)).accuracy["normsub"] for s in range(10)])
    assert acc > majority + 0.02, acc


def test_cli_text_output_and_errors(capsys, tmp_path):
    assert main(["--dataset", "car", "--eps", "2", "--reps", "1"]) == 0
    text = capsys.readouterr().out
    assert "eps=2 per person" in text and "non-private" in text
    assert "  protocols: DE for class, buying, maint, doors, persons, lug_boot, safety\n" in text  # auto at ε = 2
    assert main(["--dataset", "car", "--eps", "1", "--reps", "1", "--mode", "fast", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["protocols"] == {"class": "DE", **dict.fromkeys(
        ["buying", "maint", "doors", "persons", "lug_boot", "safety"], "OUE")}  # fmt: skip
    assert main(["--dataset", "car", "--data-dir", str(tmp_path), "--reps", "1"]) == 0  # falls back to shared
    (tmp_path / "x.csv").write_text("a,y\n1,2\n")
    with pytest.raises(SystemExit):
        main(["--csv", str(tmp_path / "x.csv")])
    assert "name the class column with --label" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        main(["--csv", str(tmp_path / "missing.csv"), "--label", "y"])
    assert exit.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_class_share_reaches_the_collection_and_the_majority_class_is_reported(capsys, tmp_path):
    """Car at ε = 0.5 in fast mode, seed 55: with one person in seven on the class input (the
    uniform choice) the reports name the wrong majority class and the model scores 0.55; with
    40 % on it they name the right one (0.67; the majority class 0.72)."""
    common = ["--dataset", "car", "--protocol", "auto", "--eps", "0.5", "--mode", "fast", "--reps", "1"]
    common += ["--seed", "55", "--estimator", "normsub", "--json"]
    assert main(common) == 0
    uniform = json.loads(capsys.readouterr().out)
    assert main([*common, "--class-share", "0.4"]) == 0
    shared = json.loads(capsys.readouterr().out)
    assert "class_share" not in uniform and shared["class_share"] == 0.4
    assert uniform["accuracy_mean"] < shared["accuracy_mean"] - 0.1
    # A spec states its own share: the simulator follows it, and refuses --class-share beside it.
    spec = json.loads(Path("sim/specs/car.json").read_text()) | {"class_share": 0.4}
    (tmp_path / "car.json").write_text(json.dumps(spec))
    by_spec = ["--dataset", "car", "--spec", str(tmp_path / "car.json"), "--mode", "fast", "--reps", "1"]
    assert main([*by_spec, "--seed", "55", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy_mean"] > uniform["accuracy_mean"] + 0.1
    with pytest.raises(SystemExit) as stop:
        main([*by_spec, "--class-share", "0.4"])
    assert stop.value.code == 2 and "--spec fixes class-share" in capsys.readouterr().err
    for bad, message in (
        (["--class-share", "1"], "must lie in"),
        (["--class-share", "0.3", "--budget", "split"], "goes with"),
    ):
        with pytest.raises(SystemExit) as stop:
            main([*common, *bad])
        assert stop.value.code == 2 and message in capsys.readouterr().err


def test_help_explains_the_privacy_budget(capsys):
    out = run_main(main, capsys, "--help").stdout
    assert "exactly one randomised report" in out
    assert "--estimator" in out and "--data-dir" in out
    assert "held-out 20% is printed" in out and "%%" not in out


def test_http_replay_matches_the_in_process_accuracy(capsys):
    # At eps 4 the model beats the constant: no run searches for the people it would need (2 s a
    # run at eps 1), which the comparison does not look at.
    common = ["--dataset", "car", "--protocol", "OUE", "--eps", "4", "--reps", "2", "--seed", "5", "--json"]
    assert main([*common, "--log-loss"]) == 0
    in_process = json.loads(capsys.readouterr().out)
    assert main([*common, "--log-loss", "--via", "http", "--clients", "64"]) == 0
    over_http = json.loads(capsys.readouterr().out)
    assert over_http["via"] == "http" and over_http["reports_per_second"] > 0
    assert over_http["accuracy_mean"] == in_process["accuracy_mean"]
    assert over_http["nonprivate_mean"] == in_process["nonprivate_mean"]
    # The service's model has the same temperature (its bootstrap is seeded by the same statistics).
    for key in ("log_loss_mean", "log_loss_std", "prior_log_loss_mean"):
        assert over_http[key] == pytest.approx(in_process[key], rel=1e-9), key
    runs = [run_once(load_dataset("car"), "OUE", 4.0, seed, ("normsub",), log_loss=True) for seed in (5, 6)]
    assert in_process["log_loss_mean"] == pytest.approx(np.mean([r.log_loss["normsub"] for r in runs]))
    assert in_process["prior_log_loss_mean"] == pytest.approx(np.mean([r.prior_log_loss for r in runs]))
    assert main(common) == 0
    assert "log_loss_mean" not in json.loads(capsys.readouterr().out)  # only when asked


def test_the_local_aggregator_holds_every_participant_connection_at_once():
    """Every participant client of a replay connects from 127.0.0.1, so the aggregator a replay
    starts holds --clients connections at once, past the service's default of 256 per address
    (past which it answers 503 and closes)."""
    import asyncio
    from urllib.parse import urlsplit

    from sim.http_replay import LocalAggregator

    async def statuses(url: str, n: int) -> list[bytes]:
        address = urlsplit(url)
        links = [await asyncio.open_connection(address.hostname, address.port) for _ in range(n)]
        for _, writer in links:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: local\r\n\r\n")
        answers = [(await reader.readline()).split()[1] for reader, _ in links]
        for _, writer in links:
            writer.close()
        return answers

    with LocalAggregator(300) as local:
        answers = asyncio.run(statuses(local.url, 300))
    assert answers.count(b"200") == 300, sorted(set(answers))


def test_an_aggregator_refusing_the_replay_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """Whether the aggregator refuses to create the replay's collection or refuses its reports
    (here: bodies above --max-body), the replay says so in one line and exits 2."""
    import asyncio

    from aggregator.service.app import open_store
    from participant import CollectionSpec

    from .servers import ADMIN, Server

    async def create(db) -> str:
        """car's collection in a new database, as the service stores one created over HTTP."""
        spec = CollectionSpec.from_json(Path("sim/specs/car.json").read_text())
        store, _ = await open_store(str(db), ADMIN)
        try:
            await store.create_collection("car", spec, 0)
        finally:
            await store.close()
        return "car"

    db = tmp_path / "small-bodies.sqlite3"
    collection = asyncio.run(create(db))
    server = Server(db, None, 1, "--max-body", "40").start()  # a report is about 70 bytes
    monkeypatch.setenv("LDPNB_ADMIN_TOKEN", ADMIN)
    sim = ["--dataset", "car", "--via", "http", "--aggregator", server.url]
    try:
        results = [run_main(main, capsys, *sim, *extra) for extra in (["--reps", "1"], ["--collection", collection])]
    finally:
        server.stop()
    words_of = ["creating the collection failed (413)", f"the aggregator at {server.url} refused a report (413)"]
    for result, words in zip(results, words_of):
        assert result.returncode == 2, result.stderr
        assert words in result.stderr.strip().splitlines()[-1], result.stderr


@pytest.mark.parametrize("command", [
    ["compare", "--dataset", "car", "--eps", "abc"],
    ["compare", "--dataset", "car", "--eps", "0"],
    ["sweep", "--datasets", "car", "--out", "unused", "--eps", "0"],
    ["sweep", "--datasets", "car", "--out", "unused", "--eps", "-1"],
    ["sweep", "--datasets", "car", "--out", "unused", "--eps", "1,abc"],
])  # fmt: skip
def test_a_bad_epsilon_is_one_line_and_exit_2_in_every_subcommand(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_main(main, capsys, *command)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"python -m sim {command[0]}: error: argument --eps: ")
    assert "must lie in [0.001, 50]" in last or "expected numbers separated by commas" in last
    assert not (tmp_path / "unused").exists()  # refused before anything ran


def test_replay_into_the_operators_enrolled_collection(tmp_path, capsys):
    """The operator creates a collection (enrollment, a release threshold) from car's shipped spec
    and issues tokens; the simulator replays car into it by id, with no admin token, and reads
    back a model whose accuracy equals the in-process run's on the same seed and spec."""
    import urllib.request

    import aiohttp  # noqa: F401  (the service is real; only the simulator talks to it)

    from .servers import AUTH, Server

    server = Server(tmp_path / "agg.sqlite3").start()
    try:
        spec = json.loads(open("sim/specs/car.json").read())
        request = urllib.request.Request(
            f"{server.url}/collections",
            data=json.dumps({"spec": spec, "min_reports": 1000, "enrollment": True}).encode(),
            headers={**AUTH, "Content-Type": "application/json"},
        )
        collection = json.loads(urllib.request.urlopen(request).read())["id"]
        base = ["--dataset", "car", "--via", "http", "--aggregator", server.url, "--collection", collection]
        with pytest.raises(SystemExit) as refused:
            main([*base, "--json"])
        assert refused.value.code == 2 and "--tokens FILE" in capsys.readouterr().err
        request = urllib.request.Request(
            f"{server.url}/collections/{collection}/enrollments", data=json.dumps({"count": 1400}).encode(),
            headers={**AUTH, "Content-Type": "application/json"},
        )  # fmt: skip
        tokens = json.loads(urllib.request.urlopen(request).read())["tokens"]
        (tmp_path / "tokens.txt").write_text("\n".join(tokens) + "\n")
        assert main([*base, "--tokens", str(tmp_path / "tokens.txt"), "--seed", "3", "--json", "--log-loss"]) == 0
        out, err = capsys.readouterr()
        replayed = json.loads(out)
        assert replayed["sent"] == 1382 and replayed["collection"] == collection
        assert "sending the training split of seed 3 (80 %" in err
        in_process = ["--dataset", "car", "--spec", "sim/specs/car.json", "--seed", "3", "--reps", "1", "--json"]
        assert main([*in_process, "--log-loss"]) == 0
        in_process = json.loads(capsys.readouterr().out)
        assert replayed["accuracy"] == in_process["accuracy_mean"]
        assert replayed["majority"] == in_process["majority_mean"] and replayed["all_rows"] is False
        assert replayed["beats_constant"] == in_process["beats_constant"]
        assert replayed["log_loss"] == pytest.approx(in_process["log_loss_mean"], rel=1e-9)
        assert replayed["prior_log_loss"] == pytest.approx(in_process["prior_log_loss_mean"])
        # Every row, into a collection without enrollment: said so, and scored on what it learned from.
        request = urllib.request.Request(
            f"{server.url}/collections", data=json.dumps({"spec": spec, "min_reports": 10}).encode(),
            headers={**AUTH, "Content-Type": "application/json"},
        )  # fmt: skip
        open_one = json.loads(urllib.request.urlopen(request).read())["id"]
        everything = ["--dataset", "car", "--via", "http", "--aggregator", server.url, "--collection", open_one]
        assert main([*everything, "--all-rows"]) == 0
        out, err = capsys.readouterr()
        assert "sending every row" in err and "1728 reports sent" in out and "scored on every row it learned from" in out
        assert "best constant (every row) 0.7002" in out
        for extra, words in [
            (["--eps", "2"], "the collection's published spec fixes eps"),
            (["--reps", "3"], "one repetition"),
        ]:
            with pytest.raises(SystemExit):
                main([*base, *extra])
            assert words in capsys.readouterr().err.strip().splitlines()[-1]
    finally:
        server.stop()
    with pytest.raises(SystemExit):
        main(["--dataset", "car", "--spec", "sim/specs/car.json", "--eps", "2"])
    assert "--spec fixes eps: leave out --eps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--dataset", "car", "--all-rows"])
    assert "--all-rows goes with --collection" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["sweep", "--datasets", "car", "--eps", "1", "--reps", "1", "--jobs", "1"],
    ["compare", "--dataset", "car", "--eps", "1", "--reps", "1"],
])  # fmt: skip
def test_an_out_folder_that_cannot_be_written_is_refused_before_any_run(command, tmp_path, capsys, monkeypatch):
    import sim.compare
    import sim.sweep

    def never(*args, **kwargs):
        raise AssertionError("a run started before --out was checked")

    monkeypatch.setattr(sim.compare, "compare", never)
    monkeypatch.setattr(sim.sweep, "build_cells", never)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit) as exit:
        main([*command, "--out", str(tmp_path / "a-file" / "results")])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err
    assert "--out " in err.strip().splitlines()[-1] and "cannot write there" in err


@pytest.mark.parametrize("args, words", [
    (["sweep", "--datasets", "car", "--reps", "0"], "--reps: must be at least 1"),
    (["sweep", "--datasets", "car", "--jobs", "0"], "--jobs: must be at least 1"),
    (["sweep", "--datasets", "car", "--bins", "1"], "--bins must be 0"),
    (["sweep", "--datasets", "car", "--bins", "3"], "every data set here is categorical"),
    (["sweep", "--datasets", "car", "--approaches", "7"], "--approaches: unknown value '7': choose from 1, 2, 3"),
    (["sweep", "--datasets", "car", "--approaches", "abc"], "expected comma-separated int values"),
    (["sweep", "--datasets", "australian", "--reduce", "pca", "--components", "0"], "must be at least 1"),
    (["compare", "--dataset", "car", "--reps", "0"], "--reps: must be at least 1"),
    (["compare", "--dataset", "car", "--knn", "-1"], "--knn: must be at least 0, got -1"),
])  # fmt: skip
def test_sweep_and_compare_refuse_bad_options_in_one_line(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main([*args, *(["--out", "out"] if args[0] == "sweep" else ["--out", "out"])])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert words in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_model_that_learned_nothing_is_told_with_the_people_it_would_need(capsys):
    """Car at ε = 0.1 (fast mode): the model does not beat always answering the most common
    class, and the run says so in one line, with how many people it would take (simulated as
    ``sim plan`` simulates populations); mushroom at ε = 4 beats it, and no such line is printed."""
    assert main(["--dataset", "car", "--eps", "0.1", "--mode", "fast", "--reps", "5"]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if "does not beat the best constant classifier on the test rows" in line]
    assert len(lines) == 1 and ("people it would" in lines[0] or "more people were not shown to help" in lines[0]), out
    assert "best constant (test rows)" in out and "estimating the people" in err
    assert main(["--dataset", "car", "--eps", "0.1", "--mode", "fast", "--reps", "5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["beats_constant"] is False and summary["gain_over_constant"] <= summary["gain_over_constant_se"]
    assert summary["people_needed"] is None or summary["people_needed"] > summary["n_train"]
    assert main(["--dataset", "mushroom", "--protocol", "DE", "--eps", "4", "--mode", "fast", "--reps", "3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["beats_constant"] is True and "people_needed" not in summary


def test_a_model_that_learned_nothing_names_the_shuffler_when_it_would_beat_the_constant(capsys):
    """Car, OUE at ε = 1 (the default), 1,382 people: the model learns nothing, and the same people
    through a shuffler at the same ε against the aggregator would (issue 66): the run names that
    accuracy and a command that differs from the run (issue 81: with ε left at its default it named
    the run itself), and that command gives the very accuracy quoted."""
    import shlex

    argv = ["--dataset", "car", "--protocol", "OUE", "--reps", "5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "through a shuffler" in line]
    assert line.endswith(": python -m sim --dataset car --reps 5 --central-eps 1 --mode fast"), line
    assert main([*argv, "--json"]) == 0
    via = json.loads(capsys.readouterr().out)["through_shuffler"]
    assert via["gain_over_constant"] > via["gain_over_constant_se"] and via["local_eps"] > 1
    assert f"give {via['accuracy_mean']:.4f} (" in line
    assert main([*shlex.split(via["command"])[3:], "--json"]) == 0
    shuffled = json.loads(capsys.readouterr().out)
    assert shuffled["beats_constant"] is True and shuffled["accuracy_mean"] == via["accuracy_mean"]
    # Where the shuffler does not help either (ε = 0.05), nothing is named.
    assert main(["--dataset", "car", "--protocol", "OUE", "--eps", "0.05", "--reps", "3", "--mode", "fast", "--json"]) == 0
    assert "through_shuffler" not in json.loads(capsys.readouterr().out)


def test_the_verdict_is_the_paired_gain_against_its_standard_error():
    from sim.verdict import verdict

    found = verdict([0.8, 0.82, 0.78], [0.7, 0.7, 0.7], 100)
    assert found.gain == pytest.approx(0.1) and found.se == pytest.approx(0.02 / np.sqrt(3)) and found.learned
    assert not verdict([0.71, 0.69, 0.72, 0.70], [0.7, 0.7, 0.7, 0.7], 100).learned
    one = verdict([0.75], [0.7], 100)  # one split: the accuracy's binomial error, sqrt(0.75·0.25/100)
    assert one.se == pytest.approx(np.sqrt(0.75 * 0.25 / 100)) and one.learned


def test_compare_writes_runs_and_summary_and_prints_json(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--dataset", "car", "--eps", "0.5,4", "--reps", "3", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    import pandas as pd

    runs = pd.read_csv(out / "runs.csv").to_dict("records")
    assert len(runs) == 5 * 2 * 3 and {r["model"] for r in runs} == {s["model"] for s in summary}
    table = pd.read_csv(out / "summary.csv")
    assert len(table) == len(summary) == 10
    ours = [row for row in summary if row["privacy"] == "local"]
    assert [row["eps"] for row in ours] == [0.5, 4.0] and all(0 < row["majority_mean"] < 1 for row in ours)
    assert all(isinstance(row["beats_constant"], bool) for row in summary)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_file_without_signal_is_told_it_learned_nothing(tmp_path, capsys, seed):
    """500 rows whose class is uniform and independent of every feature: whatever the draws, the
    model beats no constant classifier, because it is compared with the best constant on the very
    test rows it is scored on (a training split's majority scores below a half on an even split,
    which a model without signal then passes by chance)."""
    rng = np.random.default_rng(seed)
    rows = ["a,b,c,class"] + [
        f"{rng.choice(['x', 'y', 'z'])},{rng.choice(['p', 'q'])},{rng.choice(['u', 'v', 'w', 't'])},{rng.choice(['yes', 'no'])}"
        for _ in range(500)
    ]
    path = tmp_path / "noise.csv"
    path.write_text("\n".join(rows) + "\n")
    assert main(["--csv", str(path), "--label", "class", "--eps", "4", "--mode", "fast", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["beats_constant"] is False, summary
    assert main(["--csv", str(path), "--label", "class", "--eps", "4", "--mode", "fast"]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "does not beat the best constant classifier on the test rows" in line]
    assert "it learned nothing to rely on" in line and ("more people were not shown to help" in line or "people it would" in line)


@pytest.mark.parametrize("typed, meant", [("plann", "'plan'"), ("swep", "'sweep'"), ("zzz", "sweep, compare, plan")])
def test_a_mistyped_subcommand_is_named_with_the_one_meant(typed, meant, capsys):
    with pytest.raises(SystemExit) as exit:
        main([typed, "--dataset", "car"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1 and f"unknown command {typed!r}" in err and meant in err


def test_the_verdict_of_two_repetitions_is_their_paired_standard_error():
    """Two repetitions are a sample of paired differences, not one split: their standard error is
    sd(ddof=1)/√2, not the test accuracy's binomial error (which here would call the gain noise)."""
    from sim.verdict import verdict

    two = verdict([0.75, 0.71], [0.7, 0.7], 100)  # differences 0.05 and 0.01
    assert two.gain == pytest.approx(0.03) and two.se == pytest.approx(np.std([0.05, 0.01], ddof=1) / np.sqrt(2))
    assert two.se == pytest.approx(0.02) and two.learned
    assert np.sqrt(0.73 * 0.27 / 100) > two.gain  # the binomial error would not have it learned
    assert not verdict([0.75, 0.69], [0.7, 0.7], 100).learned  # differences 0.05 and -0.01: 0.02 ± 0.03


def test_the_shuffled_command_turns_eps_into_central_eps_and_never_repeats_the_run():
    from sim.shuffler_hint import shuffled_command

    assert shuffled_command(["--dataset", "car", "--eps", "0.5", "--protocol", "OUE"], 0.5) == (
        "python -m sim --dataset car --central-eps 0.5 --mode fast"
    )
    assert shuffled_command(["--dataset=car", "--eps=2", "--protocol=DE", "--mode", "replay"], 2.0) == (
        "python -m sim --dataset=car --central-eps=2 --mode fast"
    )
    assert shuffled_command(["--csv", "my data.csv", "--mode=fast"], 1.0) == (
        "python -m sim --csv 'my data.csv' --central-eps 1 --mode fast"
    )
