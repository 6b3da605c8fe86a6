"""HTML and SVG reports of simulation runs."""
