"""Every option of every command line says what it does in ``--help``."""

from __future__ import annotations

import argparse

import pytest

from aggregator.operator.cli import build_parser as aggregator_parser
from sim.cli import build_parser as sim_parser
from sim.compare import build_parser as compare_parser
from sim.plan import build_parser as plan_parser
from sim.sweep import build_parser as sweep_parser

PARSERS = {
    "python -m aggregator": aggregator_parser,
    "python -m sim": sim_parser,
    "python -m sim sweep": sweep_parser,
    "python -m sim plan": plan_parser,
    "python -m sim compare": compare_parser,
}


def commands(parser: argparse.ArgumentParser, path: str):
    """``(command, parser)`` for ``parser`` and each of its subcommands, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{path} {name}")


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """The options and positional arguments of ``parser`` (not its subcommands) without a help text."""
    return [
        "/".join(action.option_strings) or action.dest
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
        and not action.help
    ]


@pytest.mark.parametrize("name", PARSERS)
def test_every_option_has_a_help_text(name):
    missing = {
        command: found
        for command, parser in commands(PARSERS[name](), name)
        if (found := undocumented(parser))
    }
    assert not missing, f"options without help: {missing}"
    for command, parser in commands(PARSERS[name](), name):
        assert parser.format_help(), command  # a stray % in a help text raises here


def test_the_check_finds_an_option_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--said", help="what it does")
    sub = parser.add_subparsers().add_parser("deep")
    sub.add_argument("id")
    assert [undocumented(p) for _, p in commands(parser, "x")] == [[], ["id"]]
