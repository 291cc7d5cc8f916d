"""The web console (``strom console``): a client over the wire, like Kafbat UI or
Redpanda Console, that shows a Kafka-compatible cluster's brokers, topics, messages
and consumer groups in a browser and changes them through forms."""
