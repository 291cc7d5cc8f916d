"""KRaft consensus, sans-I/O: the core (``core``), its log view (``log``) and the
messages it speaks (``messages``). Owns no sockets, files or clocks."""

from strom.raft.core import QuorumInfo, RaftConfig, RaftNode, Ready, ReplicaInfo, Role

__all__ = ["QuorumInfo", "RaftConfig", "RaftNode", "Ready", "ReplicaInfo", "Role"]
