"""Handlers of the admin APIs: topics, partitions and reassignment, configs, client quotas."""
