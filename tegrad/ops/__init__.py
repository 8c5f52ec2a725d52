"""Tensor operators (elementwise, shape manipulation, reductions, indexing) as computes."""
__all__ = []
