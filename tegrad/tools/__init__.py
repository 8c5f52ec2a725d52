"""User tools on top of the library: the command line (``python -m tegrad``), the digits
demo, the operator explainer, and the one place that compiles programs for them."""
