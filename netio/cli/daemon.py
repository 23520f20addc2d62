"""``netio-daemon``: the host/switch telemetry exporter.

    netio-daemon --config /etc/netio/netio-daemon.toml
    netio-daemon --check-config --config FILE      # validate and exit
    netio-daemon --once --sysfs-root DIR/sys       # one collection, exposition to stdout

Exit status: 0 after a clean SIGTERM, 2 on a bad configuration or option,
1 when the listen address cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys

from netio.daemon import eventlog
from netio.daemon.config import Config, load_config
from netio.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="netio-daemon", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--listen", help="HOST:PORT to serve on (overrides daemon.listen)")
    p.add_argument("--sysfs-root", help="sysfs root (overrides daemon.sysfs_root)")
    p.add_argument("--web-config", help="exporter-toolkit style web config (TLS, basic auth)")
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
        from netio.daemon.config import _listen

        changes["listen"] = _listen(args.listen, "--listen")
    if args.sysfs_root:
        changes["sysfs_root"] = args.sysfs_root
    if args.web_config:
        changes["web_config_file"] = args.web_config
    if args.log_format:
        changes["log_format"] = args.log_format
    return dataclasses.replace(cfg, daemon=dataclasses.replace(d, **changes))  # type: ignore[arg-type]


async def _once(cfg: Config, profile: bool) -> str:
    from netio.daemon.app import Daemon
    from netio.telemetry.profile import to_json_dict

    d = Daemon(cfg)
    for job in d.jobs:
        await d._run_once(job, cfg.daemon.collector_timeout_s)
    if profile:
        return json.dumps(to_json_dict(d.snapshot.profile), indent=1) + "\n"
    return (await d.render_body(False)).decode()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args)
        from netio.daemon.app import Daemon
        from netio.daemon.webconfig import load_web_config

        if cfg.daemon.web_config_file:
            web = load_web_config(cfg.daemon.web_config_file)
        else:
            from netio.daemon.webconfig import WebConfig

            web = WebConfig()
    except ConfigError as e:
        print(f"netio-daemon: configuration error: {e}", file=sys.stderr)
        return 2
    if args.check_config:
        print(f"netio-daemon: configuration OK ({args.config or 'defaults'})")
        return 0
    eventlog.setup(cfg.daemon.log_format)
    if args.once:
        sys.stdout.write(asyncio.run(_once(cfg, args.json)))
        return 0

    async def run() -> int:
        daemon = Daemon(cfg, config_path=args.config, web_config=web)
        try:
            await daemon.run()
        except OSError as e:
            print(f"netio-daemon: cannot listen on {cfg.daemon.listen}: {e.strerror}",
                  file=sys.stderr)
            return 1
        return 0

    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
