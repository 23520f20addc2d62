"""netio-daemon: configuration, scheduling, snapshot store, HTTP exporter,
PFC storm watchdog and triggered capture."""
