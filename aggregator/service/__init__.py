"""The HTTP service: the aiohttp application, its routes and what protects them.

:mod:`.app` builds the application (:func:`~.app.create_app`) and :mod:`.handlers` holds its
routes; reports reach the store through the group commit of :mod:`.writer`; :mod:`.errors`,
:mod:`.auth`, :mod:`.ratelimit`, :mod:`.connections` and :mod:`.addresses` answer and bound what
strangers may send; :mod:`.answers` caches built answers, :mod:`.metrics` counts for Prometheus,
:mod:`.keys` names what the application holds. ``page.html`` (the status page), ``openapi.json``
and ``favicon.svg`` are served from here.

Imports: ``participant``, :mod:`aggregator.estimation` and :mod:`aggregator.store`; never the
operator's command line, which starts the service.
"""
