"""ASSERT TOPIC / SCHEMA's timeout: the statement's, else the server's default, read from
its properties (a bad value is one line)."""

from __future__ import annotations

import pytest

from strom.config import ConfigError
from strom.ksql import asserts
from strom.ksql import statements as st
from strom.ksql.config import server_config


def test_the_default_timeouts_come_from_the_servers_properties() -> None:
    config = server_config(
        {
            "ksql.assert.topic.default.timeout.ms": "2500",
            "ksql.assert.schema.default.timeout.ms": "40",
        }
    )
    assert (config.assert_topic_timeout_ms, config.assert_schema_timeout_ms) == (2500, 40)
    assert server_config({}).assert_topic_timeout_ms == 1000
    topic = st.AssertTopic("t")
    assert asserts.timeout_ms(topic, config.assert_topic_timeout_ms) == 2500
    timed = st.AssertTopic("t", timeout=st.Duration(3, "SECONDS"))
    assert asserts.timeout_ms(timed, config.assert_topic_timeout_ms) == 3000
    with pytest.raises(ConfigError) as bad:
        server_config({"ksql.assert.topic.default.timeout.ms": "soon"})
    assert "\n" not in str(bad.value) and "ksql.assert.topic.default.timeout.ms" in str(bad.value)


def test_a_check_is_tried_until_its_timeout_then_its_last_failure_is_the_answer() -> None:
    tries: list[int] = []

    def never() -> None:
        tries.append(1)
        raise asserts.AssertionFailed(f"try {len(tries)}")

    with pytest.raises(asserts.AssertionFailed) as failed:
        asserts.retried(never, 350)
    assert tries and str(failed.value) == f"try {len(tries)}"

    def third_time() -> None:
        tries.append(1)
        if len(tries) % 3:
            raise asserts.AssertionFailed("not yet")

    tries.clear()
    asserts.retried(third_time, 5000)
    assert len(tries) == 3
