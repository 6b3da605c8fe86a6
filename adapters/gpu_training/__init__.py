"""The GPU training adapter.

Not built yet: tracked in issue 4; it registers no commands until then.
"""
