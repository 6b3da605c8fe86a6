"""Dynamic Resource Allocation (``resource.k8s.io/v1``): its shapes, named once.

- :mod:`~kubesage.core.dra.api`: the API group, kinds, field names, and the names
  NVIDIA's DRA driver for GPUs publishes (driver, device classes, attribute keys);
- :mod:`~kubesage.core.dra.slices`: one ResourceSlice → its GPUs and MIG devices;
- :mod:`~kubesage.core.dra.nodes`: a node's slices merged → :class:`NodeDevices`;
- :mod:`~kubesage.core.dra.claims`: ResourceClaimTemplates and pod claim references.

Pure data: the package imports no layer (an import-linter contract holds it to that),
so the informer, ``kubesage topology discover``, the launchers and the decision
packages may all use it.
"""
