"""The operator's command line, ``python -m aggregator``: serve, create, list, status, model,
enroll, copy and spec.

:mod:`.cli` parses and dispatches (``serve`` starts :mod:`aggregator.service`), :mod:`.commands`
talks to a running service as its admin, :mod:`.copy` moves a SQLite database into PostgreSQL,
:mod:`.specdraft` drafts a spec from a sample read by :mod:`.csvdata`, and :mod:`.usage` makes
every command-line mistake one line.

Imports: everything below it (``participant``, :mod:`aggregator.estimation`,
:mod:`aggregator.store`, :mod:`aggregator.service`); nothing imports it but ``__main__`` and the
simulator's command lines (which share its parser and CSV reader).
"""
