"""The ksql server's query settings (``strom.ksql.config``): defaults, ``spark.*``
passed to the session, and a bad value refused in one line naming the property."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config import ConfigError
from strom.ksql.config import server_config


def test_query_settings_and_their_defaults() -> None:
    config = server_config({})
    assert (config.processing_guarantee, config.auto_offset_reset) == ("at_least_once", "latest")
    assert config.trigger_interval_ms == 500 and config.state_dir.name == "strom-ksql"
    config = server_config(
        {
            "ksql.streams.processing.guarantee": "EXACTLY_ONCE_V2",
            "ksql.streams.auto.offset.reset": "earliest",
            "ksql.streams.state.dir": "/var/lib/ksql",
            "ksql.spark.trigger.interval.ms": "100",
            "spark.sql.shuffle.partitions": "4",
        }
    )
    assert (config.processing_guarantee, config.auto_offset_reset) == (
        "exactly_once_v2", "earliest"
    )  # fmt: skip
    assert config.state_dir == Path("/var/lib/ksql") and config.trigger_interval_ms == 100
    assert config.spark_settings == {"spark.sql.shuffle.partitions": "4"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ksql.streams.processing.guarantee", "twice"),
        ("ksql.streams.auto.offset.reset", "middle"),
        ("ksql.spark.trigger.interval.ms", "soon"),
    ],
)
def test_a_bad_query_setting_is_one_line(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        server_config({key: value})
    assert key in str(refused.value) and "\n" not in str(refused.value)


def test_the_output_topic_prefix() -> None:
    assert server_config({}).output_topic_prefix == ""
    config = server_config({"ksql.output.topic.name.prefix": "thing-"})
    assert config.output_topic_prefix == "thing-"
    assert config.properties["ksql.output.topic.name.prefix"] == "thing-"  # SHOW PROPERTIES
