"""One-off studies whose findings go into a RESULTS file."""
