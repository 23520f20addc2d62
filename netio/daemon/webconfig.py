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
clear error rather than silently ignored.  The hashes are checked by
:class:`netio.daemon.auth.BasicAuth`.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from typing import Any

from netio.errors import ConfigError

# $2a$/$2b$/$2y$, a two-digit cost, 22 characters of salt and 31 of hash (bcrypt's base64).
_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash

    @property
    def auth_required(self) -> bool:
        return bool(self.users)


def _yaml_problem(e: Exception) -> str:
    """One line: PyYAML's messages span several (context, problem, a quoted snippet)."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem is None:
        return " ".join(str(e).split())
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def load_web_config(path: str) -> WebConfig:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data: Any = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("", f"cannot read: {e.strerror}", path=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError("", f"not UTF-8 text (byte {e.start}), so not a YAML file",
                          path=path) from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"not valid YAML: {_yaml_problem(e)}", path=path) from None
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
        for k in ("cert_file", "key_file"):
            try:
                with open(tls[k], "rb"):
                    pass
            except OSError as e:
                raise ConfigError(f"tls_server_config.{k}",
                                  f"cannot read {tls[k]}: {e.strerror}", path=path) from None
        try:
            ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
        except (OSError, ssl.SSLError) as e:
            raise ConfigError("tls_server_config.cert_file",
                              f"cannot load {tls['cert_file']} with key {tls['key_file']}: "
                              f"{getattr(e, 'reason', None) or e}", path=path) from None
        ca = tls.get("client_ca_file")
        if ca is not None:
            if not isinstance(ca, str):
                raise ConfigError("tls_server_config.client_ca_file", "must be a file name",
                                  path=path)
            try:
                ctx.load_verify_locations(ca)
            except (OSError, ssl.SSLError) as e:
                why = e.strerror if isinstance(e, OSError) and e.strerror else \
                    getattr(e, "reason", None) or e
                raise ConfigError("tls_server_config.client_ca_file",
                                  f"cannot load {ca}: {why}", path=path) from None
            ctx.verify_mode = ssl.CERT_REQUIRED
    users: dict[str, bytes] = {}
    raw_users = data.get("basic_auth_users")
    if raw_users is not None:
        if not isinstance(raw_users, dict):
            raise ConfigError("basic_auth_users", "must be a mapping user: bcrypt-hash",
                              path=path)
        for user, h in raw_users.items():
            if not isinstance(h, str) or not _BCRYPT.fullmatch(h):
                raise ConfigError(f"basic_auth_users.{user}",
                                  "must be a bcrypt hash ($2y$10$ and 53 more characters, "
                                  "as htpasswd -nBC 10 prints)", path=path)
            users[str(user)] = h.encode()
    return WebConfig(ctx, users)
