"""Kafka Connect on Strom: a Connect worker with Kafka Connect's REST API, worker
properties, internal topics, connector class names and converters, so that a Kafka
user's connector configs and scripts work unchanged.

The parts, downward: ``service`` (one worker process: REST server, herder, stores) ->
``rest`` (the API) -> ``herder`` (configs, target states, status and assignment; the
standalone and distributed forms) -> ``spark_runner`` (tasks as Spark jobs, and the
choice of runner by task class) -> ``runtime`` (runs connectors and tasks: the runner
interface, and the in-worker runner) and ``stores`` (config, offset and status stores in
memory, a file or Kafka's three compacted topics) -> ``plugins`` (class names) ->
``connectors``, ``converters``, ``connector_config`` -> ``api``, ``config_def``, ``data``.

Where a task runs, behind the ``runtime.TaskRunner`` interface: a ``spark_tasks`` task
(the JDBC connectors) as Spark jobs on the worker's SparkSession (``spark_runner``), any
other in the worker process (threads with confluent-kafka clients). The FileStream
connectors stay in the worker: they read or
write one local file, which a Spark executor on another machine would not see, and a
line's latency matters more than throughput. docs/connect.md keeps the table.

A client of the broker: it reaches Kafka over the network with confluent-kafka and never
imports broker internals, so it works against any Kafka cluster.
"""
