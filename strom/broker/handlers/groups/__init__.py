"""Handlers of the group APIs: classic groups and FindCoordinator, consumer groups
(KIP-848), committed offsets, share groups (KIP-932) and the share coordinator's RPCs."""
