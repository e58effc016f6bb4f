"""A deliberately broken conv-core backend whose candidates hook is misspelled (integration tests)."""
