"""Regular expressions that clients send, compiled with RE2 as Kafka compiles them.

Owns compiling a client's pattern (KIP-848's SubscribedTopicRegex, ListTransactions'
TransactionalIdPattern) with google-re2: matching takes time linear in the input
whatever the pattern, so no pattern can freeze the broker the way a backtracking engine
can be made to (``(a+)+b`` against a long run of ``a``). RE2 refuses what it cannot
match in linear time (backreferences, lookaround): such a pattern is an invalid one,
as for Kafka (RE2/J). Errors are raised as ``InvalidRegex`` with RE2's message, not
logged.

Does not own when patterns are evaluated (the consumer group caches what a pattern
matched until the topics change).
"""

from __future__ import annotations

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 8 << 20  # a pattern's program; a bigger one is refused


class InvalidRegex(ValueError):
    """The pattern is not a regular expression RE2 takes."""


class Pattern:
    __slots__ = ("text", "_compiled")

    def __init__(self, text: str) -> None:
        try:
            self._compiled = re2.compile(text, _OPTIONS)
        except re2.error as exc:
            message = exc.args[0] if exc.args else exc
            if isinstance(message, bytes):
                message = message.decode(errors="replace")
            raise InvalidRegex(str(message)) from None
        self.text = text

    def fullmatch(self, value: str) -> bool:
        return self._compiled.fullmatch(value) is not None

    def search(self, value: str) -> bool:
        return self._compiled.search(value) is not None


def compile_pattern(text: str) -> Pattern:
    """``text`` compiled with RE2; InvalidRegex if RE2 refuses it."""
    return Pattern(text)
