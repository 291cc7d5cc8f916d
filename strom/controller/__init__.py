"""The controller side of a node: the metadata quorum's driver (the network and disk side
of ``strom.raft``) and its wire, the controller listener's handlers (KRaft's RPCs,
registration and heartbeats, admin requests forwarded by brokers) and the active
controller's service around ``strom.cluster.quorum_controller``. What a broker asks of
the controller is ``strom.broker.controller_client``."""
