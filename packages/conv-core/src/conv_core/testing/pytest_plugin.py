"""pytest plugin (entry point ``pytest11``) of the conformance kit."""
