"""The operator's command line against a real service: create, list, status, model, enroll; one
line and exit code 2 for every kind of bad use; a model file scikit-learn loads in a fresh process."""

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from participant import Participant
from participant.wire import pack_batch

from .conftest import TABLE_1, table_1_spec
from .inprocess import run_main
from .servers import ADMIN, Server, free_port

FIELDS = ["age", "income", "gender", "missed_payment"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("operator") / "op.sqlite3").start()
    yield server
    server.stop()


def process(server, *args, token=ADMIN, url=None):
    """``python -m aggregator ARGS`` run as its own process against ``server``."""
    env = {**os.environ, "LDPNB_URL": url or server.url}
    env.pop("LDPNB_ADMIN_TOKEN", None)
    if token:
        env["LDPNB_ADMIN_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "aggregator", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def cli(server, capsys, monkeypatch):
    """``cli(*args, token=, url=)``: the command line's ``main(args)`` run in this process against
    ``server`` (the commands here test what it does and says, not the process: a ``python -m`` run
    costs a second of imports), as a :class:`subprocess.CompletedProcess`; a traceback is an error."""
    from aggregator.operator.cli import main

    def run(*args, token=ADMIN, url=None):
        monkeypatch.setenv("LDPNB_URL", url or server.url)
        monkeypatch.delenv("LDPNB_ADMIN_TOKEN", raising=False)
        if token:
            monkeypatch.setenv("LDPNB_ADMIN_TOKEN", token)
        return run_main(main, capsys, *args)

    return run


def one_line_error(result, *words):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def write_sample(folder):
    """A small CSV an operator could draft a spec from; returns its path."""
    path = folder / "sample.csv"
    path.write_text("colour,size,y\nred,1,yes\nblue,2,no\nred,3,yes\n")
    return path


def send(server, spec, n, seed):
    import urllib.request

    participant = Participant(spec, rng=np.random.default_rng(seed))
    records = [dict(zip(FIELDS, TABLE_1[i % 10])) for i in range(n)]
    body = pack_batch([participant.report(r) for r in records], spec)
    request = urllib.request.Request(
        f"{server.url}/collections/survey/reports", data=body, headers={"Content-Type": "application/msgpack"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert json.loads(r.read())["accepted"] == n


def test_an_operator_runs_a_collection_from_the_command_line(server, cli, tmp_path):
    spec = table_1_spec(protocol="OUE", epsilon=4.0)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    result = process(server, "create", "--spec", str(spec_file), "--id", "survey", "--min-reports", "300")
    assert result.returncode == 0, result.stderr  # the entry point, as its own process
    assert "created survey" in result.stdout and "epsilon=4-LDP per person" in result.stdout
    one_line_error(cli("create", "--spec", str(spec_file), "--id", "survey"), "409", "exists")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**spec.to_dict(), "epsilon": 1000}))
    one_line_error(cli("create", "--spec", str(bad)), "400", "epsilon must be a number from 0.001 to 50")

    listing = cli("list")
    assert listing.returncode == 0 and "survey" in listing.stdout and "collecting" in listing.stdout

    send(server, spec, 200, seed=1)
    status = cli("status", "survey", "--interval", "0.1")
    assert status.returncode == 0, status.stderr
    assert "200 people's reports of 300 needed (67%)" in status.stdout and "missed_payment" in status.stdout
    assert "z: standard deviations between" in status.stdout  # every printed column explained
    one_line_error(cli("model", "survey", "--out", str(tmp_path / "m.joblib")), "409", "100 more")

    send(server, spec, 2000, seed=2)
    assert "released" in cli("list").stdout
    for pipeline in (False, True):
        out = tmp_path / ("pipeline.joblib" if pipeline else "model.joblib")
        result = cli("model", "survey", "--out", str(out), *(["--pipeline"] if pipeline else []))
        assert result.returncode == 0, result.stderr
        card = json.loads(out.with_suffix(".card.json").read_text())
        assert card["spec_fingerprint"] == spec.fingerprint and card["reports"] == 2200
        assert card["epsilon_per_person"] == 4.0 and card["estimator"] == "normsub"
        assert set(card["estimated_people_per_class"]) == {"Yes", "No"}
        assert 0 < card["temperature"] <= 1 and "times the temperature" in card["temperature_note"]
        from aggregator.estimation.smoothing import STRENGTHS

        assert card["strength"] in STRENGTHS
        # What the reports can tell the model, in the card and printed.
        assert card["evidence"]["majority_class"] in {"Yes", "No"}
        assert card["evidence"]["summary"] in result.stdout and "most common class" in result.stdout
    # A labelled public sample fits the temperature: the least log-loss on it of every temperature.
    from scipy.special import log_softmax

    from aggregator.estimation.calibration import TEMPERATURES

    # A sample of another population (its labels reversed), so that a softer temperature fits it.
    rows = [(a, i, g, {"Yes": "No", "No": "Yes"}[y]) for a, i, g, y in TABLE_1 * 10]
    sample = tmp_path / "sample.csv"
    sample.write_text("age,income,gender,missed_payment\n" + "".join(",".join(r) + "\n" for r in rows))
    out = tmp_path / "calibrated.joblib"
    result = cli("model", "survey", "--out", str(out), "--calibrate", str(sample))
    assert result.returncode == 0, result.stderr
    card = json.loads(out.with_suffix(".card.json").read_text())
    fitted = card["temperature_fitted"]
    assert fitted["rows"] == 100 and card["temperature"] == fitted["temperature"]
    assert "fitted on 100 rows" in result.stdout and fitted["temperature"] < fitted["service_temperature"]
    import joblib

    categories = [f.categories for f in spec.features]
    codes = np.array([[list(c).index(v) for c, v in zip(categories, r[:3])] for r in rows])
    truth = np.array([["Yes", "No"].index(r[3]) for r in rows])
    served = joblib.load(tmp_path / "model.joblib")  # at the service's temperature
    scores = served.predict_log_proba(codes) / fitted["service_temperature"]  # the model's scores, up to a constant
    losses = [-log_softmax(t * scores, axis=1)[np.arange(100), truth].mean() for t in TEMPERATURES]
    assert fitted["log_loss_after"] == pytest.approx(min(losses))
    assert fitted["log_loss_after"] <= fitted["log_loss_before"]
    assert fitted["temperature"] == pytest.approx(TEMPERATURES[int(np.argmin(losses))])
    calibrated = joblib.load(out)
    assert -calibrated.predict_log_proba(codes)[np.arange(100), truth].mean() == pytest.approx(min(losses))
    assert (calibrated.predict(codes) == served.predict(codes)).all()
    # With --pool-sample the class prior and every conditional are first pooled with the sample's
    # counts, each class share weighted by the inverse of its variance (the reports' from the
    # service's estimates): on a sample all of the reports' minority class, the pooled prior makes it
    # the majority and the pooled model predicts it on every sample row.
    majority = card["evidence"]["majority_class"]
    minority = {"Yes": "No", "No": "Yes"}[majority]
    everyone = tmp_path / "minority.csv"
    everyone.write_text("age,income,gender,missed_payment\n" + "".join(",".join([*r[:3], minority]) + "\n" for r in rows))
    result = cli("model", "survey", "--out", str(out), "--calibrate", str(everyone), "--pool-sample")
    assert result.returncode == 0, result.stderr
    card = json.loads(out.with_suffix(".card.json").read_text())
    pooled = card["temperature_fitted"]["pooled"]
    assert max(pooled["class_prior"], key=pooled["class_prior"].get) == minority
    assert card["class_prior"] == pytest.approx(pooled["class_prior"])
    assert pooled["pooled_right"] == 100 and pooled["served_right"] < 100 and "pooled with the sample's" in result.stdout
    assert (joblib.load(out).predict(codes) == minority).all()
    one_line_error(cli("model", "survey", "--out", str(out), "--pool-sample"), "goes with --calibrate")
    (tmp_path / "unlabelled.csv").write_text("age,income,gender\nYoung,Low,Male\n")
    one_line_error(cli("model", "survey", "--out", str(out), "--calibrate", str(tmp_path / "unlabelled.csv")),
                   "no column missed_payment")  # fmt: skip
    (tmp_path / "other.csv").write_text("age,income,gender,missed_payment\nYoung,Low,Male,Maybe\n")
    one_line_error(cli("model", "survey", "--out", str(out), "--calibrate", str(tmp_path / "other.csv")),
                   "['Maybe'] are not the spec's classes")  # fmt: skip
    # A fresh process: load and predict on what a scikit-learn user passes (rows, a DataFrame with
    # the feature names and a label column, records as dicts), every warning an error.
    check = (
        "import warnings; warnings.simplefilter('error')\n"
        "import joblib, numpy as np, pandas as pd\n"
        f"p = joblib.load({str(tmp_path / 'pipeline.joblib')!r})\n"
        "X = np.array([['Young', 'Low', 'Male'], ['Old', 'High', 'Female']], dtype=object)\n"
        "print(list(p.predict(X)), p.predict_proba(X).shape)\n"
        "frame = pd.DataFrame({'missed_payment': ['No', 'Yes'], 'gender': ['Male', 'Female'],"
        " 'income': ['Low', 'High'], 'age': ['Young', 'Old']})\n"
        "records = frame.to_dict('records')\n"
        "assert list(p.predict(frame)) == list(p.predict(X)) == list(p.predict(records)), 'inputs disagree'\n"
        "assert np.allclose(p.predict_proba(frame), p.predict_proba(records))\n"
        f"m = joblib.load({str(tmp_path / 'model.joblib')!r})\n"
        "print(type(m).__name__, m.predict(np.array([[0, 0, 0]])).shape)\n"
    )
    fresh = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    assert "(2, 2)" in fresh.stdout and "CategoricalNB (1,)" in fresh.stdout


def test_enrollment_tokens_are_written_privately(cli, tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(table_1_spec(protocol="DE").to_json())
    assert cli("create", "--spec", str(spec_file), "--id", "enrolled", "--enrollment").returncode == 0
    out = tmp_path / "tokens.txt"
    out.write_text("")
    out.chmod(0o644)  # an existing world-readable file: the tokens must not stay readable by others
    result = cli("enroll", "enrolled", "--count", "25", "--out", str(out))
    assert result.returncode == 0, result.stderr
    tokens = out.read_text().split()
    assert len(tokens) == len(set(tokens)) == 25 and stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert cli("create", "--spec", str(spec_file), "--id", "open").returncode == 0
    one_line_error(cli("enroll", "open", "--count", "2", "--out", str(out)), "409", "without enrollment")
    assert out.read_text().split() == tokens  # a failed run leaves the tokens issued before
    fresh = tmp_path / "fresh.txt"
    one_line_error(cli("enroll", "open", "--count", "2", "--out", str(fresh)), "409")
    assert not fresh.exists()  # nor a file of its own
    nowhere = tmp_path / "missing" / "tokens.txt"
    one_line_error(cli("enroll", "enrolled", "--count", "2", "--out", str(nowhere)), "--out", "cannot write")


def test_bad_use_is_one_line_and_exit_2(server, cli, tmp_path):
    one_line_error(process(server, "list", token=None), "admin token is needed")  # as its own process, too
    one_line_error(cli("list", token=None), "admin token is needed")
    one_line_error(cli("list", token="wrong-token-wrong-token-0"), "403")
    one_line_error(cli("status", "nowhere", "--interval", "0.1"), "404", "nowhere")
    one_line_error(cli("status", "survey", "--interval", "0"), "--interval: must be greater than 0")
    one_line_error(cli("list", url=f"http://127.0.0.1:{free_port()}"), "cannot reach the service")
    one_line_error(cli("create", "--spec", str(tmp_path / "missing.json")), "cannot read the spec")
    port = cli("serve", "--port", "99999", "--db", str(tmp_path / "p.sqlite3"))  # not 99999 − 65536
    assert port.returncode == 2 and "Traceback" not in port.stderr
    assert "--port: a port lies in 0-65535" in port.stderr.strip().splitlines()[-1]
    draft = ["spec", "--csv", str(write_sample(tmp_path)), "--label", "y", "--out", str(tmp_path / "no" / "s.json")]
    one_line_error(cli(*draft), "--out", "cannot write there")
    usage = cli("create")
    assert usage.returncode == 2 and "--spec" in usage.stderr and "Traceback" not in usage.stderr
    assert "--admin-token " not in cli("list", "--help").stdout  # never on the command line


def test_a_binned_numerical_model_calibrates_on_raw_values_and_a_gaussian_one_is_refused(tmp_path):
    from aggregator import build_model
    from aggregator.operator.commands import OperatorError, calibrate
    from sim.datasets import load_dataset
    from sim.experiment import Setup, collect, spec_for, split

    data = load_dataset("australian")
    X_train, X_test, y_train, y_test = split(data, 0)
    sample = tmp_path / "sample.csv"
    for model in ("discrete", "gaussian"):
        spec = spec_for(data, "OUE", 1.0, setup=Setup(model), X_train=X_train, y_train=y_train)
        built = build_model(collect(spec, X_train, y_train, np.random.default_rng(0), "fast"), "normsub")
        columns = [f.name for f in spec.continuous.inputs]
        rows = [",".join(map(str, [*x, y])) for x, y in zip(X_test, y_test)]
        sample.write_text(",".join([*columns, spec.label]) + "\n" + "\n".join(rows) + "\n")
        if model == "gaussian":
            with pytest.raises(OperatorError, match="a discrete model"):
                calibrate(built, str(sample))
            continue
        fitted = calibrate(built, str(sample))
        assert fitted["rows"] == len(y_test) == 138 and fitted["log_loss_after"] <= fitted["log_loss_before"]
        own = fitted["model"].predict_log_proba(X_test)
        truth = [list(built.classes_).index(y) for y in y_test]
        assert -own[np.arange(138), truth].mean() == pytest.approx(fitted["log_loss_after"])


def test_ctrl_c_during_status_wait_stops_without_a_traceback(server, cli, tmp_path):
    """``status --wait`` interrupted (SIGINT, as Ctrl-C sends) ends at once with exit 130 and no
    traceback (it printed twelve frames)."""
    import signal
    import subprocess
    import sys
    import time

    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(table_1_spec().to_dict()))
    assert cli("create", "--spec", str(spec_file), "--id", "wait", "--min-reports", "100").returncode == 0
    env = {**os.environ, "LDPNB_ADMIN_TOKEN": ADMIN}
    waiting = subprocess.Popen([sys.executable, "-m", "aggregator", "status", "wait", "--wait", "--url", server.url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    # Interrupted once it talks to the service (a socket among its files): a loaded machine may
    # take seconds to start it, and a signal before then would stop the interpreter, not the command.
    def talking() -> bool:
        for fd in os.listdir(f"/proc/{waiting.pid}/fd"):
            try:
                if os.readlink(f"/proc/{waiting.pid}/fd/{fd}").startswith("socket:"):
                    return True
            except FileNotFoundError:  # closed meanwhile
                continue
        return False

    deadline = time.monotonic() + 120
    while not talking():
        assert waiting.poll() is None and time.monotonic() < deadline, waiting.stderr.read()
        time.sleep(0.05)
    waiting.send_signal(signal.SIGINT)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 130 and "Traceback" not in err, err
