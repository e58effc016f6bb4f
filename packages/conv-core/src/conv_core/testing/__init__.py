"""The conformance kit: a backend's candidates checked against the float64 reference."""
