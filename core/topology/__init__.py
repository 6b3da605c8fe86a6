"""The dynamic resource topology graph (DRTG) and its link model."""
