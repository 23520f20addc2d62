"""The NETIO_* tuning variables: a value that cannot be read is refused, naming the
variable, never replaced by the default in silence."""

from __future__ import annotations

import pytest

from netio.backends.soft.driver import OffloadMode
from netio.environment import choice, microseconds
from netio.errors import ConfigError


def test_unset_and_empty_give_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETIO_TEST_US", raising=False)
    assert microseconds("NETIO_TEST_US", 200) == 200
    monkeypatch.setenv("NETIO_TEST_US", " ")
    assert microseconds("NETIO_TEST_US", 200) == 200
    monkeypatch.setenv("NETIO_TEST_US", "0")
    assert microseconds("NETIO_TEST_US", 200) == 0
    monkeypatch.setenv("NETIO_TEST_US", "1500")
    assert microseconds("NETIO_TEST_US", 200) == 1500


@pytest.mark.parametrize(("text", "said"), [
    ("2ms", "'2ms' is not a whole number of microseconds"),
    ("1.5", "'1.5' is not a whole number of microseconds"),
    ("-3", "-3 microseconds is negative (0 turns it off)"),
])
def test_bad_microseconds_name_the_variable(monkeypatch: pytest.MonkeyPatch, text: str,
                                            said: str) -> None:
    monkeypatch.setenv("NETIO_VERBS_SPIN_US", text)
    with pytest.raises(ConfigError) as info:
        microseconds("NETIO_VERBS_SPIN_US", 0)
    assert str(info.value) == f"NETIO_VERBS_SPIN_US: {said}"


def test_choice_reads_case_insensitively_and_refuses_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETIO_SOFT_GSO", "ON")
    assert choice("NETIO_SOFT_GSO", OffloadMode, OffloadMode.OFF) is OffloadMode.ON
    monkeypatch.setenv("NETIO_SOFT_GSO", "yes")
    with pytest.raises(ConfigError) as info:
        choice("NETIO_SOFT_GSO", OffloadMode, OffloadMode.OFF)
    assert str(info.value) == "NETIO_SOFT_GSO: 'yes' is not one of off, on, auto"


def test_polled_wait_refuses_a_bad_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    from netio.api.handles import poll_spin_s

    monkeypatch.setenv("NETIO_POLL_SPIN_US", "fast")
    with pytest.raises(ConfigError, match="NETIO_POLL_SPIN_US: 'fast'"):
        poll_spin_s()
    monkeypatch.setenv("NETIO_POLL_SPIN_US", "50")
    assert poll_spin_s() == pytest.approx(50e-6)
