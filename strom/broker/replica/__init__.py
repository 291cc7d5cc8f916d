"""The partition and replica manager: a leader's appends and its followers (ISR, high
watermark), the fetchers of a follower, AlterPartition, the fsync thread, and the
transaction markers and verification that write through a leader."""
