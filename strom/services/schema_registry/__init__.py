"""The schema registry (``strom schema-registry``): Confluent's REST API, with its
schemas kept in the compacted topic ``_schemas`` of any Kafka-compatible cluster."""
