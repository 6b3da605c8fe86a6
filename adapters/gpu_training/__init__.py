"""The GPU training adapter: MIG layouts, defragmentation, AllReduce-aware gangs, elastic
scaling, NVML, and the launcher.

- Planners: ``mig`` (MIG profile catalogues, placement rules, mig-parted layouts),
  ``mig_workload`` (MIG requests in the core's ClusterState), ``relayout`` (MIG
  re-layout plans), ``defrag`` (cheapest migrations and background compaction),
  ``allreduce`` (gang placement and rank order on the core's DRTG), ``elastic``
  (training phases and elastic scale plans).
- Devices: ``nvml`` with ``fake_nvml`` (GPU inventory and topology), ``nvml_samples``
  (this node's GPUs as samples for the control loop).
- The control loop: ``reconcilers`` builds ``gpu-defrag`` (``defrag_reconciler``),
  ``gpu-elastic`` (``elastic_reconciler``) and ``gpu-gang`` (``gang_reconciler``);
  ``loop_support`` is what they share.
- ``launcher`` and ``cli``: ``kubesage gpu launch``; ``cli.ADAPTER`` is the
  entry point the core loads.
"""
