"""The HTTP service: the aiohttp application, its routes and what protects them.

:mod:`.app` builds the application (:func:`~.app.create_app`) from the routes of
:mod:`.ingestion` (reports in), :mod:`.collection_routes` (collections, their status and codes),
:mod:`.model_answers` (estimates and models), :mod:`.shuffled_reports` and :mod:`.issuance`
(shuffled batches, keys and tokens) and :mod:`.site` (health, metrics, pages), on the HTTP
plumbing of :mod:`.plumbing`; reports reach the store through the group commit of
:mod:`.writer`; :mod:`.errors`, :mod:`.auth`, :mod:`.ratelimit` and
:mod:`participant.addresses` answer and bound what strangers may send; :mod:`.answers` caches
built answers, :mod:`.metrics` counts for Prometheus, :mod:`.keys` names what the application
holds. ``page.html`` (the status page), ``openapi.json`` and ``favicon.svg`` are served from here.

Imports: ``participant``, :mod:`aggregator.estimation` and :mod:`aggregator.store`; never the
operator's command line, which starts the service.
"""
