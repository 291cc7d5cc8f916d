"""A faust (faust-streaming) worker for the exactly-once tests: one agent reads
``FAUST_SOURCE`` and writes ``b"out-" + value`` to ``FAUST_SINK`` with
processing_guarantee="exactly_once" (one aiokafka transactional producer per input
partition, the input offsets sent to each transaction). It commits every
``FAUST_COMMIT_EVERY`` records and every ``FAUST_COMMIT_INTERVAL`` seconds (large values
keep its transactions open for a test to kill it with them). Run as
``python faust_app.py worker --without-web``; the other settings come from the
environment. Tables live in memory."""

from __future__ import annotations

import os

import faust

app = faust.App(
    os.environ["FAUST_APP_ID"],
    broker=os.environ["FAUST_BROKER"],
    processing_guarantee="exactly_once",
    datadir=os.environ["FAUST_DATADIR"],
    store="memory://",
    web_enabled=False,
    topic_partitions=int(os.environ["FAUST_PARTITIONS"]),
    topic_replication_factor=1,
    broker_commit_every=int(os.environ.get("FAUST_COMMIT_EVERY", "10")),
    broker_commit_interval=float(os.environ.get("FAUST_COMMIT_INTERVAL", "0.5")),
    # A killed worker's member leaves the group after this (the broker's least), so its
    # successor gets the partitions soon.
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
)
source = app.topic(os.environ["FAUST_SOURCE"], value_type=bytes, value_serializer="raw")
sink = app.topic(os.environ["FAUST_SINK"], value_type=bytes, value_serializer="raw")


@app.agent(source)
async def transform(stream):
    async for event in stream.events():
        # Faust sends an output with the transactional producer named after the output's
        # partition number ("<app id>-<topic group>-<partition>"; it expects copartitioned
        # topics) and commits an input partition's offsets with the producer of the
        # input's partition number: an output is in the same transaction as its input's
        # offset only when it goes to its input's partition number.
        await sink.send(value=b"out-" + event.value, partition=event.message.partition)


@app.agent(sink)
async def sink_metadata(stream):
    """Does nothing with the outputs. faust-streaming 0.15.3 looks an output's partitions
    up in its consumer's metadata, which holds only the topics it subscribes to; for any
    other topic it sends with its plain, non-transactional producer and drops the
    partition (faust-streaming issue 177), so the sink is subscribed here."""
    async for _ in stream:
        pass


if __name__ == "__main__":
    app.main()
