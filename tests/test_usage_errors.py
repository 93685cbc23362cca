"""Every command-line mistake is one line naming the option and what it takes, plus a pointer to
``--help``, and exit code 2 (no usage block, no traceback)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from aggregator.operator.cli import build_parser as aggregator_parser
from sim import compare, plan, sweep
from sim.cli import build_parser as sim_parser
from sim.cli_options import _columns

from .inprocess import run_main

# Options whose value is free text (a name, a path to write, a URL, a column list): no value is bad.
FREE = (None, str, _columns)
BAD = "abc-not-valid"


def parsers() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """``(the words before the option, its parser)`` of every command."""
    found = [([], sim_parser()), (["sweep"], sweep.build_parser()), (["compare"], compare.build_parser()),
             (["plan"], plan.build_parser())]  # fmt: skip
    root = aggregator_parser()
    (commands,) = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    found += [([name], parser) for name, parser in commands.choices.items()]
    return found


def valued_options() -> list[tuple[str, list[str], str]]:
    """``(command, words before, option)`` for every option that takes a value with a form."""
    cases = []
    for words, parser in parsers():
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            if action.choices is None and action.type in FREE:
                continue
            cases.append((parser.prog, words, action.option_strings[-1]))
    return cases


CASES = valued_options()


def test_every_command_and_its_valued_options_are_walked():
    commands = {prog for prog, _, _ in CASES}
    assert {"python -m sim", "python -m sim sweep", "python -m sim compare", "python -m sim plan"} <= commands
    assert {"python -m aggregator serve", "python -m aggregator spec", "python -m aggregator create"} <= commands
    assert len(CASES) >= 40


@pytest.mark.parametrize(("prog", "words", "option"), CASES, ids=[f"{p} {o}" for p, _, o in CASES])
def test_a_bad_value_is_one_line_naming_the_option(prog, words, option, capsys):
    parser = dict((p.prog, p) for _, p in parsers())[prog]
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([option, BAD])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"{prog}: error: argument {option}") and f"(see {prog} --help)" in err, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--dataset", "car", "--eps", "abc"], "argument --eps: expected a number, got 'abc'"),
        (["--dataset", "car", "--eps", "0"], "argument --eps: must lie in [0.001, 50], got 0"),
        (["--dataset", "car", "--eps", "-1"], "argument --eps: must lie in [0.001, 50], got -1"),
        (["--dataset", "car", "--reps", "0"], "argument --reps: must be at least 1, got 0"),
        (["--dataset", "car", "--theta", "2"], "argument --theta: must lie in (0, 1), got 2"),
        (["--csv", "missing.csv", "--label", "y"], "argument --csv: CSV file missing.csv does not exist"),
        (["sweep", "--datasets", "car", "--protocols", "XYZ", "--out", "x"], "argument --protocols: unknown value 'XYZ'"),
        (["--dataset", "car", "--class-share", "1"], "argument --class-share: must lie in (0, 1), got 1"),
    ],
)
def test_the_mistakes_reviewers_made_are_one_line(args, says, capsys):
    from sim.cli import main

    result = run_main(main, capsys, *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr and "--help)" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("sim", ["--dataset", "car", "--epz", "1"], "python -m sim: error: unrecognized arguments: --epz 1; did you mean --eps?"),
        ("sim", ["sweep", "--datasets", "car", "--protocls", "DE"], "did you mean --protocols?"),
        ("aggregator", ["serve", "--prot", "8080"], "python -m aggregator serve: error: unrecognized arguments: --prot 8080; did you mean --port?"),
        ("aggregator", ["craete", "--spec", "x"], "invalid choice: 'craete' (choose from "),
        ("aggregator", ["craete", "--spec", "x"], "; did you mean 'create'?"),
        ("shuffler", ["serve", "--agregator", "http://127.0.0.1:1"], "python -m shuffler serve: error: the following arguments are required: --aggregator, --token-file, --db; did you mean --aggregator?"),
        ("aggregator", ["create", "--spce", "s.json", "--id", "x"], "did you mean --spec?"),
    ],
)
def test_a_mistyped_option_or_command_names_the_closest(command, args, says, capsys):
    from aggregator.operator.cli import main as aggregator
    from shuffler.cli import main as shuffler
    from sim.cli import main as sim

    result = run_main({"sim": sim, "aggregator": aggregator, "shuffler": shuffler}[command], capsys, *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def test_an_unknown_option_far_from_every_name_gets_no_guess():
    result = subprocess.run([sys.executable, "-m", "sim", "--dataset", "car", "--zzzzzz"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unrecognized arguments: --zzzzzz (see" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("aggregator", ["serve", "--prot", "8080"], "did you mean --port?"),
        ("shuffler", ["serve", "--agregator", "http://127.0.0.1:1"], "did you mean --aggregator?"),
    ],
)
def test_each_entry_points_process_refuses_in_one_line_without_a_traceback(command, args, says):
    """The same refusals as above, in a process of its own (``python -m sim`` is the test above)."""
    result = subprocess.run([sys.executable, "-m", command, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
