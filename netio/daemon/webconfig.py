"""TLS and basic auth from a web-config file, as in the Prometheus exporter toolkit.

Accepted keys (https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)::

    tls_server_config:
      cert_file: /etc/netio/server.crt
      key_file: /etc/netio/server.key
      client_ca_file: /etc/netio/ca.crt        # optional: require client certs
      min_version: TLS12                       # TLS10..TLS13
    basic_auth_users:
      prometheus: $2y$10$...                   # bcrypt hash (htpasswd -B)

Other toolkit keys (http_server_config, cipher_suites, ...) are rejected with a
clear error rather than silently ignored.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
from dataclasses import dataclass, field
from typing import Any

from netio.errors import ConfigError

_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash

    @property
    def auth_required(self) -> bool:
        return bool(self.users)


class BasicAuth:
    """Checks ``Authorization: Basic`` headers; bcrypt is slow on purpose, so a
    verified (user, password) is remembered by its SHA-256 (as the toolkit does)."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._ok: set[bytes] = set()

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if header is None or not header.startswith("Basic "):
            return False
        try:
            raw = base64.b64decode(header[6:].strip(), validate=True)
        except ValueError:
            return False
        user_b, sep, pw = raw.partition(b":")
        if not sep:
            return False
        user = user_b.decode("utf-8", "replace")
        hashed = self.users.get(user)
        if hashed is None:
            return False
        digest = hashlib.sha256(user_b + b"\0" + pw + b"\0" + hashed).digest()
        if digest in self._ok:
            return True
        import bcrypt

        # bcrypt accepts $2y$ (htpasswd) hashes as $2b$.
        try:
            good = bcrypt.checkpw(pw, b"$2b$" + hashed[4:] if hashed.startswith(b"$2y$")
                                  else hashed)
        except ValueError:
            return False
        if good:
            self._ok.add(digest)
        return bool(good)


def load_web_config(path: str) -> WebConfig:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data: Any = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("", f"cannot read: {e.strerror}", path=path) from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"not valid YAML: {e}", path=path) from None
    if data is None:
        return WebConfig()
    if not isinstance(data, dict):
        raise ConfigError("", "must be a mapping", path=path)
    unknown = sorted(set(data) - {"tls_server_config", "basic_auth_users"})
    if unknown:
        raise ConfigError(unknown[0], "unsupported key", path=path)
    ctx: ssl.SSLContext | None = None
    tls = data.get("tls_server_config")
    if tls is not None:
        if not isinstance(tls, dict):
            raise ConfigError("tls_server_config", "must be a mapping", path=path)
        bad = sorted(set(tls) - {"cert_file", "key_file", "client_ca_file", "min_version"})
        if bad:
            raise ConfigError(f"tls_server_config.{bad[0]}", "unsupported key", path=path)
        for k in ("cert_file", "key_file"):
            if not isinstance(tls.get(k), str):
                raise ConfigError(f"tls_server_config.{k}", "is required", path=path)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        mv = tls.get("min_version", "TLS12")
        if mv not in _TLS_VERSIONS:
            raise ConfigError("tls_server_config.min_version",
                              f"must be one of {', '.join(_TLS_VERSIONS)}", path=path)
        ctx.minimum_version = _TLS_VERSIONS[mv]
        try:
            ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
        except (OSError, ssl.SSLError) as e:
            raise ConfigError("tls_server_config.cert_file", f"cannot load: {e}",
                              path=path) from None
        ca = tls.get("client_ca_file")
        if ca is not None:
            try:
                ctx.load_verify_locations(ca)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError("tls_server_config.client_ca_file", f"cannot load: {e}",
                                  path=path) from None
            ctx.verify_mode = ssl.CERT_REQUIRED
    users: dict[str, bytes] = {}
    raw_users = data.get("basic_auth_users")
    if raw_users is not None:
        if not isinstance(raw_users, dict):
            raise ConfigError("basic_auth_users", "must be a mapping user: bcrypt-hash",
                              path=path)
        for user, h in raw_users.items():
            if not isinstance(h, str) or not h.startswith(("$2a$", "$2b$", "$2y$")):
                raise ConfigError(f"basic_auth_users.{user}", "must be a bcrypt hash ($2y$...)",
                                  path=path)
            users[str(user)] = h.encode()
    return WebConfig(ctx, users)
