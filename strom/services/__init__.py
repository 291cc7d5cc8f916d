"""HTTP surfaces: the shared HTTP stack, and the services built on it."""
