"""Kafka Connect's single message transforms and predicates, by their Kafka class names.

- ``base``: what a transformation and a predicate are, and the helpers they share (the
  key or value side a ``$Key`` / ``$Value`` transform works on, Kafka's ``Requirements``
  messages, a struct field's value with its default).
- ``fields``: InsertField, ReplaceField, MaskField, ValueToKey, ExtractField, HoistField,
  Flatten, HeaderFrom, SetSchemaMetadata.
- ``casts``: Cast and TimestampConverter (with Java's SimpleDateFormat patterns).
- ``routing``: RegexRouter, TimestampRouter, Filter, DropHeaders, InsertHeader.
- ``java_dates``: Java's SimpleDateFormat patterns, formatting and parsing in UTC.
- ``predicates``: TopicNameMatches, HasHeaderKey, RecordIsTombstone.
- ``chain``: a connector's ``transforms=a,b`` built into stages (each with its
  ``predicate`` and ``negate``) and applied in order.

Every transformation and predicate is a pure function of one Connect record
(``api.SourceRecord`` or ``api.SinkRecord``): any runner (the worker's threads, Spark)
applies them the same way. Error handling around them is ``strom.connect.errors``'.
"""
