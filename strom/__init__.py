"""Strom: an event streaming platform in Python that speaks the Kafka wire protocol."""
