"""Acting through Kubernetes, and reading it.

- ``translate``: v1 Pod / Node JSON → the core's ``PodRequest`` / ``NodeSpec``;
- ``extender``, ``extender_wire``, ``binding``, ``server``, ``embedded``: the scheduler
  extender (its handlers, wire format, and the one assume-then-bind path) served by
  ``kubesage serve``, on a live cluster or the embedded simulated one;
- ``apiclient``: kubeconfig loading, and the only module that imports the
  ``kubernetes`` client (everything else takes its classes from there);
- ``informer``, ``accounting``, ``binder``: list + watch into a ``ClusterState``, what
  each pod holds in it, binding through the Binding subresource;
- ``gang``, ``secondary``, ``leader``: the secondary scheduler (``schedulerName``),
  all-or-nothing gangs, leader election on a Lease;
- ``scheduling_policy``, ``v1_models``, ``policy_crd``, ``policy_source``, ``webhook``,
  ``tls``: the ``SchedulingPolicy`` resource, the Kubernetes shapes it carries, its
  CRD, where policies come from, the mutating admission webhook and its certificates;
  ``namespaces``: namespace labels by list + watch, for the webhook's
  ``namespaceSelector``;
- ``watch_stream``: reading a watch stream by hand (shared by the informer and the cache);
- ``collector``: the cluster as a :class:`~kubesage.core.perception.Collector`;
- ``actuators``, ``embedded_actuators``, ``workloads``: the control loop's actuators
  (bind, evict, scale, patch, label a node) on a live or the embedded cluster, and
  which workloads they may scale or patch;
- ``validation``: offline schema validation of the manifests kubesage writes.
"""
