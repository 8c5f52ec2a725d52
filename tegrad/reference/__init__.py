"""The reference evaluator: every program run with numpy, the oracle all tests compare against."""
