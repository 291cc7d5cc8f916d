"""Kafka principals: ``User:alice``, and the anonymous one of an unauthenticated
connection (PLAINTEXT, or SSL without a client certificate)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name`` (the name may hold colons); ValueError without a type."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"not a principal (Type:name): {text!r}")
        return cls(principal_type, name)


USER = "User"
ANONYMOUS = KafkaPrincipal(USER, "ANONYMOUS")
