"""The network side of a node: request routing and the context a handler gets, the
inter-broker client, the purgatory of delayed answers, the cluster as clients are told
of it, and the event loop's lag gauge. The listeners and the connection loop are in
``strom.broker.server``."""
