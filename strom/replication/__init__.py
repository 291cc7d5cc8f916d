"""Partition replication's rules, sans-I/O: what a leader and a follower decide.

``leader``: a partition leader's view of its followers (Kafka's Partition): their
progress, the ISR with the change in flight (the maximal ISR of KIP-497), the high
watermark, which follower joins or leaves, and whether an acks=all append is answered.
``follower``: where a follower truncates when the leader says its log diverged.

No sockets, no clock, no threads: the caller passes the time and the facts and carries
out the decisions. The broker drives it over the network (``strom.broker.replica.manager``)
and a deterministic simulator drives it in the tests (``tests/sim``). Imports only the
protocol's error codes.
"""
