"""A deliberately broken conv-core backend whose conv_core_candidates raises (integration tests)."""
