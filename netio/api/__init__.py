"""The implementation of netio's public IO API (``import netio``).

types.py holds the backend-neutral verbs types, handles.py the awaitable/waitable
operation handles and the event-loop runner, exchange.py netio's own out-of-band
connection exchange, context.py and endpoint.py the objects users hold. Users import
all of it from ``netio``.
"""
