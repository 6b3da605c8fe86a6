"""Acting through Kubernetes, and reading it.

- ``translate``: v1 Pod / Node JSON → the core's ``PodRequest`` / ``NodeSpec``;
- ``extender``, ``extender_wire``, ``binding``, ``server``, ``embedded``: the scheduler
  extender (its handlers, wire format, and the one assume-then-bind path) served by
  ``kubesage serve``, on a live cluster or the embedded simulated one;
- ``apiclient``: kubeconfig loading, and the only module that imports the
  ``kubernetes`` client (everything else takes its classes from there);
- ``informer``, ``slice_cache``, ``claim_cache``, ``optional_group``, ``accounting``,
  ``binder``: list + watch into a ``ClusterState`` (nodes, pods, the GPU driver's
  ResourceSlices and the ResourceClaims, a group the cluster may not serve), what each
  pod holds in it, binding through the Binding subresource;
- ``gang``, ``secondary``, ``leader``: the secondary scheduler (``schedulerName``),
  all-or-nothing gangs, leader election on a Lease;
- ``scheduling_policy``, ``v1_models``, ``policy_crd``, ``policy_source``, ``webhook``,
  ``tls``: the ``SchedulingPolicy`` resource, the Kubernetes shapes it carries, its
  CRD, where policies come from, the mutating admission webhook and its certificates;
  ``namespaces``: namespace labels by list + watch, for the webhook's
  ``namespaceSelector`` and the running pods' anti-affinity terms;
- ``watch_stream``: reading a watch stream by hand (shared by the informer and the cache);
- ``collector``: the cluster as a :class:`~kubesage.core.perception.Collector`;
- ``actuators``, ``embedded_actuators``, ``workloads``: the control loop's actuators
  (bind, evict, scale, patch, label a node) on a live or the embedded cluster, and
  which workloads they may scale or patch;
- ``dra_inventory``, ``dra_selectors``, ``dra_allocation``, ``dra_requests``,
  ``dra_binding``: kubesage's GPU choice written into a pod's ResourceClaims (Dynamic
  Resource Allocation) before its bind: the node's slice devices, the CEL subset, the
  allocation planned in ring order, a pod's GPU demand from its claims, the API writes
  with conflict re-decision and rollback;
- ``validation``: offline schema validation of the manifests kubesage writes.
- ``device_mode``: whether a cluster hands GPUs out through DRA or the device plugin
  (the ``--devices`` default, asked by discovery).
"""
