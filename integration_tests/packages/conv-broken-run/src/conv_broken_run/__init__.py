"""A deliberately broken conv-core backend whose candidate raises when run (integration tests)."""
