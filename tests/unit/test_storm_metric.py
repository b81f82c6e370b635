"""tests/integration/storm.py's metric reader: a series the agent did not export is an error, so a
"the queue drained" (gauge == 0) check cannot pass on a scrape that lacks the gauge."""

from __future__ import annotations

import pytest

from tests.integration.storm import metric

SCRAPE = (
    "# TYPE cnichain_agent_queue_waiting gauge\n"
    "cnichain_agent_queue_waiting 0\n"
    "cnichain_agent_queue_waiting_peak 29\n"
)


def test_the_series_is_read_by_its_exact_name():
    assert metric(SCRAPE, "cnichain_agent_queue_waiting") == 0.0
    assert metric(SCRAPE, "cnichain_agent_queue_waiting_peak") == 29.0


def test_a_series_that_was_not_exported_is_an_error():
    with pytest.raises(AssertionError, match="no series"):
        metric(SCRAPE, "cnichain_agent_workers_idle")
