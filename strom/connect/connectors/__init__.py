"""Strom's built-in connectors, each under Strom's own class name with Kafka's (or the
vendor's) class names as aliases (``strom.connect.plugins``)."""
