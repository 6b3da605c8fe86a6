"""The mixed-workload scenario: the whole control loop on the simulator's clock.

``kubesage simulate --scenario mixed`` runs inference pods, large single-GPU tasks and
multi-GPU training jobs on DGX-class nodes, through the same ``ControlLoop`` and
reconcilers ``kubesage serve`` runs, once per variant (``k8s-default``, ``fgd``,
``kubesage`` and its ablations), and measures what the product promises. See
docs/scenario.md.
"""
