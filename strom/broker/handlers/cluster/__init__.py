"""Handlers of the cluster APIs: Metadata, DescribeCluster, ApiVersions, UpdateFeatures."""
