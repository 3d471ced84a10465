"""store.shared."""
