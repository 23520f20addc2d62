"""Suite-wide test settings."""

from __future__ import annotations

import pytest

#: A test marked ``lab`` that fails is run once more before it counts as failed: the
#: guests are emulated (TCG) on a 2-core host, and a run that a busy host slowed past a
#: deadline is not a defect of netio. A second failure fails the suite.
LAB_RERUNS = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("lab") is not None and (
                item.get_closest_marker("flaky") is None):
            item.add_marker(pytest.mark.flaky(reruns=LAB_RERUNS, reruns_delay=2))
