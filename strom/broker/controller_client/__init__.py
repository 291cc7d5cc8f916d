"""What a broker asks of the active controller: the channel requests go over (in process
when this node is the active controller), registration and heartbeats, producer id
blocks."""
