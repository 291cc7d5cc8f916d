"""The pure parts of the ``strom`` sink's exactlyOnce option, with no broker and no Spark:
the writer options that turn it on and the ones refused with it, the write task's
identity from Spark's local properties and the ids derived from it, and the marker check
that decides whether a micro-batch is a replay of one already committed."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from strom.spark.exactly_once import (
    StromSinkError,
    WriteTask,
    already_committed,
    write_task,
)
from strom.spark.options import (
    DEFAULT_TRANSACTIONAL_ID_PREFIX,
    StromOptionError,
    parse_writer_options,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
QUERY = "5f0c1d3e-8a2b-4c6d-9e7f-0a1b2c3d4e5f"


def test_exactly_once_is_off_unless_asked() -> None:
    opts = parse_writer_options(BOOTSTRAP, streaming=True)
    assert not opts.exactly_once
    assert opts.transactional_id_prefix == DEFAULT_TRANSACTIONAL_ID_PREFIX


@pytest.mark.parametrize("text", ["true", "TRUE", " True "])
def test_exactly_once_on(text: str) -> None:
    # Spark hands a Python source its option names in lower case
    opts = parse_writer_options({**BOOTSTRAP, "exactlyonce": text}, streaming=True)
    assert opts.exactly_once


def test_exactly_once_must_be_a_boolean() -> None:
    with pytest.raises(StromOptionError, match="exactlyOnce must be true or false"):
        parse_writer_options({**BOOTSTRAP, "exactlyOnce": "yes"}, streaming=True)


def test_exactly_once_is_refused_for_batch_writes() -> None:
    with pytest.raises(StromOptionError, match="for streaming writes"):
        parse_writer_options({**BOOTSTRAP, "exactlyOnce": "true"}, streaming=False)
    assert not parse_writer_options(
        {**BOOTSTRAP, "exactlyOnce": "false"}, streaming=False
    ).exactly_once


def test_transactional_id_prefix() -> None:
    opts = parse_writer_options(
        {**BOOTSTRAP, "exactlyOnce": "true", "transactionalIdPrefix": " billing "},
        streaming=True,
    )
    assert opts.transactional_id_prefix == "billing"
    with pytest.raises(StromOptionError, match="needs exactlyOnce=true"):
        parse_writer_options({**BOOTSTRAP, "transactionalIdPrefix": "billing"}, streaming=True)
    with pytest.raises(StromOptionError, match="must not be empty"):
        parse_writer_options(
            {**BOOTSTRAP, "exactlyOnce": "true", "transactionalIdPrefix": " "}, streaming=True
        )


@pytest.mark.parametrize("exactly_once", ["true", "false"])
def test_a_transactional_id_of_ones_own_is_refused(exactly_once: str) -> None:
    with pytest.raises(StromOptionError, match="kafka.transactional.id is not allowed"):
        parse_writer_options(
            {**BOOTSTRAP, "exactlyOnce": exactly_once, "kafka.transactional.id": "mine"},
            streaming=True,
        )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"kafka.enable.idempotence": "false"}, "enable.idempotence=false"),
        ({"kafka.acks": "1"}, "acks=1"),
        ({"kafka.request.required.acks": "0"}, "acks=0"),
    ],
)
def test_producer_settings_transactions_cannot_have(setting: dict, message: str) -> None:
    with pytest.raises(StromOptionError, match=message):
        parse_writer_options({**BOOTSTRAP, "exactlyOnce": "true", **setting}, streaming=True)
    # without exactlyOnce they are the user's business
    assert not parse_writer_options({**BOOTSTRAP, **setting}, streaming=True).exactly_once


@pytest.mark.parametrize("acks", ["all", "-1", "ALL"])
def test_acks_all_goes_with_exactly_once(acks: str) -> None:
    opts = parse_writer_options(
        {**BOOTSTRAP, "exactlyOnce": "true", "kafka.acks": acks}, streaming=True
    )
    assert opts.exactly_once


def test_write_task_from_local_properties() -> None:
    task = write_task(QUERY, "17", 3)
    assert task == WriteTask(query_id=QUERY, batch_id=17, partition_id=3)
    assert task.transactional_id("strom-eos") == f"strom-eos-{QUERY}-3"


def test_the_ids_do_not_depend_on_the_micro_batch() -> None:
    """A task's successor in every later micro-batch, and its replay after a restart from
    the same checkpoint, use the same transactional id, which fences it."""
    ids = {write_task(QUERY, str(batch), 1).transactional_id("p") for batch in range(5)}
    assert ids == {f"p-{QUERY}-1"}
    assert write_task(QUERY, "0", 0).transactional_id("p") != ids.pop()


@pytest.mark.parametrize(
    ("query_id", "batch_id"), [(None, "1"), ("", "1"), (QUERY, None), (None, None)]
)
def test_write_task_outside_a_streaming_query(query_id: str | None, batch_id: str | None) -> None:
    with pytest.raises(StromSinkError, match="exactlyOnce needs the query id"):
        write_task(query_id, batch_id, 0)


def test_write_task_batch_id_must_be_a_number() -> None:
    with pytest.raises(StromSinkError, match="not an integer"):
        write_task(QUERY, "seven", 0)


@pytest.mark.parametrize(
    ("marker", "batch", "done"),
    [
        (-1, 0, False),  # nothing committed yet
        (-1001, 0, False),  # OFFSET_INVALID
        (0, 0, True),  # the replay of micro-batch 0
        (0, 1, False),  # the next micro-batch
        (6, 7, False),
        (7, 7, True),
        (8, 7, True),
    ],
)
def test_already_committed(marker: int, batch: int, done: bool) -> None:
    assert already_committed(marker, batch) is done
