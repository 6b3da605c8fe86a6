"""The flink adapter. Not built yet: tracked in issue 3; it registers no commands until then."""
