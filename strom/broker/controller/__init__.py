"""The controller side of a node: the quorum driver and its wire, the controller
listener's handlers and the active controller's service, and what a broker asks of the
controller (the channel, registration and heartbeats, producer id blocks)."""
