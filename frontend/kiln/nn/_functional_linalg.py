"""Functional forms (kiln.nn.functional) for one area of the op set."""

__all__ = []
