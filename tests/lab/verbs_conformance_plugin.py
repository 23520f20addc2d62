"""pytest plugin (``-p tests.lab.verbs_conformance_plugin``): run the IO API conformance
suite (tests/api) unchanged over the verbs backend, inside an rxe lab guest."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import tests.api.conftest as api

    api.BACKENDS = ("verbs",)
