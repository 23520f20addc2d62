"""netio backends: ways to move RDMA traffic. ``soft``: the userspace RoCEv2
engine (``netio.roce``) on UDP sockets."""
