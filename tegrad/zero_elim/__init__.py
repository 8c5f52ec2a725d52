"""Zero elimination: rewrites gradients so their loops are the ones a person would write."""
