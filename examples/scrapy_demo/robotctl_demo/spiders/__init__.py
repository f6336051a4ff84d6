"""The project's one spider."""
