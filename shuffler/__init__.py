"""The shuffler: a separate party between devices and the aggregator, so that reports reach the
aggregator anonymous (``python -m shuffler serve``).

It takes sealed reports from devices (:mod:`participant.sealing`: it can read none of them),
stores each before acknowledging it, and releases a collection's reports to the aggregator only
in batches of at least the collection's ``min_batch``, in a uniformly random order drawn from the
operating system's CSPRNG, at a fixed interval. It keeps no address, header or arrival time with
a report (the store is keyed by each report's digest, not by arrival), and deletes a batch once
the aggregator acknowledged it.

- :mod:`.store`: the SQLite store, and why nothing acknowledged is lost or forwarded into a
  smaller batch;
- :mod:`.service`: the HTTP service devices send to, and the loop that releases batches;
- :mod:`.cli`: ``python -m shuffler serve``.

Run it as someone other than the aggregator's operator: a shuffler that tells the aggregator who
sent what gives the reports no anonymity (each keeps its local ε).

Imports: ``participant`` (specs, sealed lengths) and ``protocols`` below it; never ``aggregator``
(a shuffler is not the aggregator's code), ``sim`` or ``bench``.
"""
