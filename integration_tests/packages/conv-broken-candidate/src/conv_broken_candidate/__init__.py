"""A deliberately broken conv-core backend that returns malformed candidates (integration tests)."""
