"""``netio-daemon``: the host/switch telemetry exporter (Prometheus /metrics,
/healthz readiness, /livez liveness, /api/profile, /api/captures).

    netio-daemon --config /etc/netio/netio-daemon.toml
    netio-daemon --check-config --config FILE      # validate and exit
    netio-daemon --once --sysfs-root DIR/sys       # one collection, exposition to stdout
    netio-daemon --once --json --sysfs-root DIR/sys   # one collection, fabric profile JSON

SIGHUP reloads the configuration (a bad file keeps the running one), SIGTERM
and SIGINT stop. Exit codes (netio's one table, ``netio --help``): 0 after a clean stop
(or a valid --check-config, or --once); 2 a bad option; 3 a bad configuration or web
configuration file; 4 when the listen address cannot be bound; 130 when interrupted
during --once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import resource
import sys

from netio.cli.exit_codes import ExitCode
from netio.daemon import eventlog
from netio.daemon.config import Config, check_listen, check_paths, load_config
from netio.errors import ConfigError

EXIT_OK = ExitCode.OK
EXIT_USAGE = ExitCode.USAGE
EXIT_CONFIG = ExitCode.UNREADABLE
EXIT_LISTEN = ExitCode.FAILED
EXIT_INTERRUPTED = ExitCode.INTERRUPTED


def raise_descriptor_limit() -> None:
    """Lift the soft descriptor limit to the hard one (as Go programs such as
    node_exporter do at start): counter files are kept open, about 2,500 on a
    host with 8 NICs, and the usual soft limit is 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = max(soft, 1 << 16) if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        # refused: the collectors keep fewer files open (netio.telemetry.sysfs.keep_budget)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="netio-daemon", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE",
                   help="TOML configuration file (default: built-in defaults)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="address to serve on, e.g. 127.0.0.1:9935 or [::1]:9935 "
                        "(overrides daemon.listen)")
    p.add_argument("--sysfs-root", metavar="DIR", help="sysfs root (overrides daemon.sysfs_root)")
    p.add_argument("--web-config", metavar="FILE",
                   help="exporter-toolkit style web config: TLS, basic auth "
                        "(overrides daemon.web_config_file)")
    p.add_argument("--log-format", choices=("json", "text"), help="log line format")
    p.add_argument("--check-config", action="store_true",
                   help="validate the configuration (and web config) and exit")
    p.add_argument("--once", action="store_true",
                   help="collect once, print the exposition (or --json profile) and exit")
    p.add_argument("--json", action="store_true", help="with --once: print the fabric profile")
    return p


def _config(args: argparse.Namespace) -> Config:
    cfg = load_config(args.config) if args.config else Config()
    d = cfg.daemon
    changes: dict[str, object] = {}
    if args.listen:
        changes["listen"] = check_listen(args.listen, "--listen")
    if args.sysfs_root:
        changes["sysfs_root"] = args.sysfs_root
    if args.web_config:
        changes["web_config_file"] = args.web_config
    if args.log_format:
        changes["log_format"] = args.log_format
    cfg = dataclasses.replace(cfg, daemon=dataclasses.replace(d, **changes))  # type: ignore[arg-type]
    try:
        check_paths(cfg)
    except ConfigError as e:
        option = {"daemon.sysfs_root": "--sysfs-root"}.get(e.key) if args.sysfs_root else None
        raise ConfigError(option or e.key, e.reason, path=None if option else args.config) \
            from None
    return cfg


async def _once(cfg: Config, profile: bool) -> str:
    from netio.daemon.app import Daemon
    from netio.telemetry.profile import to_json_dict

    daemon = Daemon(cfg)
    snapshot = await daemon.collect_once()
    if profile:
        return json.dumps(to_json_dict(snapshot.profile), indent=1) + "\n"
    return (await daemon.render_body(False)).decode()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.json and not args.once:
        parser.error("--json needs --once (the running daemon serves the profile at "
                     "/api/profile)")
    try:
        cfg = _config(args)
        from netio.daemon.app import Daemon
        from netio.daemon.webconfig import WebConfig, load_web_config

        web = load_web_config(cfg.daemon.web_config_file) if cfg.daemon.web_config_file \
            else WebConfig()
    except ConfigError as e:
        print(f"netio-daemon: configuration error: {e}", file=sys.stderr)
        return EXIT_USAGE if e.key.startswith("--") else EXIT_CONFIG
    if args.check_config:
        print(f"netio-daemon: configuration OK ({args.config or 'defaults'})")
        return EXIT_OK
    eventlog.setup(cfg.daemon.log_format)
    raise_descriptor_limit()
    if args.once:
        try:
            sys.stdout.write(asyncio.run(_once(cfg, args.json)))
        except KeyboardInterrupt:
            print("netio-daemon: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return EXIT_OK

    async def run() -> int:
        daemon = Daemon(cfg, config_path=args.config, web_config=web)
        try:
            await daemon.run()
        except OSError as e:
            print(f"netio-daemon: cannot listen on {cfg.daemon.listen}: {e.strerror or e}",
                  file=sys.stderr)
            return EXIT_LISTEN
        return EXIT_OK

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:  # before the signal handlers are installed
        print("netio-daemon: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
