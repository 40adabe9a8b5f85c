"""kiln.nn.init: parameter initializers (torch.nn.init names)."""

__all__ = []
