"""Tests that run the benchmark scripts at their tiny size."""
