"""The request handlers, by API family: ``data`` (produce, fetch, offsets of a log),
``cluster`` (metadata, ApiVersions, features), ``groups`` (classic, consumer and share
groups and their offsets), ``transactions`` and ``admin`` (topics, partitions, configs,
quotas). The security APIs are in ``strom.broker.access``; the controller's in
``strom.controller``."""
