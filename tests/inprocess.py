"""A command line's ``main(argv)`` run in the test process, for tests of what a command prints or
refuses: a ``python -m`` run costs a second or more of imports that such a test does not test (each
entry point keeps real ``python -m`` runs elsewhere, for the process's exit status and one line)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable


def run_main(main: Callable[[list[str]], int | None], capsys, *args: str) -> subprocess.CompletedProcess:
    """``main(args)`` with its output captured by ``capsys`` (pytest's fixture): its exit status
    (``main``'s return value or ``SystemExit``'s code, None as 0), stdout and stderr, as
    :func:`subprocess.run` would give them. An exception other than ``SystemExit`` propagates: a
    traceback fails the test."""
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code or 0, out, err)
