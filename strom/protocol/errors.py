"""Kafka error codes, re-exported from kio so every layer names them one way."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
