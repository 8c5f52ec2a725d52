"""Reverse-mode differentiation of tensor programs."""
