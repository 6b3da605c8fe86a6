"""The GPU training adapter.

In progress (issue 4). Built: ``mig.py`` (MIG profile catalogues, placement rules,
mig-parted layouts), ``allreduce.py`` (AllReduce-aware gang placement over the
core's DRTG), ``elastic.py`` (training phases and elastic scale plans), ``nvml.py``
with ``fake_nvml.py`` (GPU inventory and topology), ``launcher.py`` and ``cli.py``
(``kubesage gpu launch``); MIG requests (``mig_request``) go into the core's
ClusterState; ``defrag.py`` plans migrations for whole-GPU requests that do not
fit. Not built yet: MIG re-layout plans and background compaction.
"""
