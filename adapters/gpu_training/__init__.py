"""The GPU training adapter.

In progress (issue 4): ``mig.py`` holds the MIG profile catalogues, placement rules
and mig-parted layouts. The topology graph, defragmentation, AllReduce-aware gang
placement, elastic scaling and the launcher are not built yet, and the adapter
registers no commands until they are.
"""
