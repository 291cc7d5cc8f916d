"""SQL over streams: ksqlDB's language and REST API on Strom.

- ``grammar.lark``, ``parser``: ksqlDB's statements parsed into the typed values of
  ``statements`` and ``expressions`` (the plan a Spark compiler reads);
- ``metastore``: streams, tables and custom types, kept in the command topic
  (``command_topic``) and replayed at start;
- ``server``, ``engine``: ksqlDB 0.29's REST API and the execution of DDL and
  metadata statements; ``formats``: writing INSERT VALUES rows in a source's formats;
- ``planner`` (a query's plan), ``operators`` (the plan run record at a time),
  ``readers`` (records read into rows and written back), ``runtime`` (persistent
  queries on Spark), ``push_queries`` (push and pull queries in the server),
  ``queries`` (the registry of queries), ``processing_log``.

A client of the cluster over the network (confluent-kafka): it never imports the
broker.
"""
