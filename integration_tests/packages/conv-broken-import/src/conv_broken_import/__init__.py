"""A deliberately broken conv-core backend whose hook module fails to import (integration tests)."""
