"""End-to-end tests of the control loop on a live cluster path (the fake API server)."""
