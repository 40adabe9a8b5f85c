"""kiln.nn: modules with PyTorch's names and interfaces."""

from kiln.nn import functional, init  # noqa: F401
