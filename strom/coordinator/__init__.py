"""Group coordination: classic and KIP-848 consumer groups, committed offsets."""
