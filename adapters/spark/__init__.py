"""The spark adapter. Not built yet: tracked in issue 7; it registers no commands until then."""
