"""Model definitions (and test helpers) shared by the kiln.nn tests."""
