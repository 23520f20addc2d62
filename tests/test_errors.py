"""netio.errors is the one error hierarchy: every public error lives there,
derives from NetioError and is exported by ``netio``."""

from __future__ import annotations

import errno
import inspect
import re
from pathlib import Path

import pytest

import netio
from netio import errors

NETIO = Path(netio.__file__).parent
# Module-private exceptions that never leave their module.
ALLOWED_ELSEWHERE = {("pcap/format.py", "Damage")}
_CLASS = re.compile(r"^class (\w+)\(([^)]*)\):", re.MULTILINE)


def _exception_classes() -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == errors.__name__]


def test_every_error_derives_from_netio_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 13
    for cls in classes:
        if cls is errors.CaptureWarning:
            assert issubclass(cls, UserWarning)
            continue
        assert issubclass(cls, errors.NetioError), cls


def test_no_exception_class_outside_errors_py() -> None:
    stray = []
    for path in sorted(NETIO.rglob("*.py")):
        rel = path.relative_to(NETIO).as_posix()
        if rel == "errors.py":
            continue
        for name, bases in _CLASS.findall(path.read_text()):
            if re.search(r"\b(\w*Error|Exception|\w*Warning|NetioError)\b", bases) \
                    and (rel, name) not in ALLOWED_ELSEWHERE:
                stray.append(f"{rel}: {name}({bases})")
    assert stray == [], "define errors in netio/errors.py"


@pytest.mark.parametrize("name", ["ConfigError", "DriverSocketError", "ExchangeError",
                                  "RegistrationError", "RoceError", "NetioError", "DecodeError",
                                  "EncodeError", "CaptureError", "CaptureWarning",
                                  "ScenarioError"])
def test_public_errors_exported(name: str) -> None:
    assert name in netio.__all__
    assert getattr(netio, name) is getattr(errors, name)


def test_moved_errors_are_the_ones_raised() -> None:
    # The modules that raise them use the netio.errors classes (no private copies).
    from netio.backends.soft import sockets
    from netio.daemon import config, webconfig
    from netio.interop import perftest, pingpong
    from netio.roce import memory, qp, verbs
    from netio.telemetry import dcb, ethtool, snmp

    assert config.ConfigError is webconfig.ConfigError is errors.ConfigError
    assert pingpong.ExchangeError is perftest.ExchangeError is errors.ExchangeError
    assert sockets.DriverSocketError is errors.DriverSocketError
    assert memory.RegistrationError is errors.RegistrationError
    assert verbs.RoceError is qp.RoceError is errors.RoceError
    assert dcb.DcbError is errors.DcbError
    assert ethtool.EthtoolUnsupported is errors.EthtoolUnsupported
    assert snmp.SnmpError is errors.SnmpError


def test_messages_say_what_and_where() -> None:
    e = errors.ConfigError("collectors.netdev.interval_s", "must be > 0, got -1", path="a.toml")
    assert str(e) == "a.toml: collectors.netdev.interval_s: must be > 0, got -1"
    assert isinstance(e, ValueError) and e.key == "collectors.netdev.interval_s"
    assert str(errors.ConfigError("", "cannot read: gone", path="a.toml")) == \
        "a.toml: cannot read: gone"
    x = errors.ExchangeError("perftest mtu", "1000 is not an IB MTU")
    assert str(x) == "perftest mtu: 1000 is not an IB MTU" and x.step == "perftest mtu"
    s = errors.DriverSocketError("bind 127.0.0.1:4791", OSError(errno.EADDRINUSE, "in use"))
    assert isinstance(s, OSError) and s.errno == errno.EADDRINUSE
    assert str(s) == "bind 127.0.0.1:4791: in use"
    d = errors.DcbError(errno.EOPNOTSUPP, "no DCB")
    assert d.errno == errno.EOPNOTSUPP and str(d) == "no DCB"
    assert issubclass(errors.RoceError, ValueError)
    assert issubclass(errors.RegistrationError, ValueError)
