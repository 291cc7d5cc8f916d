"""Handlers of the data APIs: Produce, Fetch and its sessions, ListOffsets,
OffsetForLeaderEpoch, DescribeLogDirs."""
