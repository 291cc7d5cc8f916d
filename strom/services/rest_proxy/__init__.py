"""The REST proxy (``strom rest-proxy``): Confluent's REST Proxy API v2 and v3 for any
Kafka-compatible cluster, a client over the wire."""
