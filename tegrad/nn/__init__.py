"""Neural-network layers and losses (NCHW images, OIHW weights) as computes."""
__all__ = []
