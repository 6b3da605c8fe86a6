"""Acting through Kubernetes, and reading it.

- ``translate``: v1 Pod / Node JSON → the core's ``PodRequest`` / ``NodeSpec``;
- ``extender``, ``server``, ``embedded``: the scheduler extender (filter, prioritize,
  bind) served by ``kubesage serve``, on a live cluster or the embedded simulated one;
- ``apiclient``, ``informer``, ``binder``: kubeconfig loading, list + watch into a
  ``ClusterState``, binding through the Binding subresource;
- ``gang``, ``secondary``, ``leader``: the secondary scheduler (``schedulerName``),
  all-or-nothing gangs, leader election on a Lease;
- ``scheduling_policy``, ``policy_source``, ``webhook``, ``tls``: the
  ``SchedulingPolicy`` CRD, where policies come from, the mutating admission webhook
  and its certificates; ``namespaces``: namespace labels by list + watch, for the
  webhook's ``namespaceSelector``;
- ``watch_stream``: reading a watch stream by hand (shared by the informer and the cache);
- ``metrics``, ``logging``: kubesage's own Prometheus metrics and JSON logs;
- ``validation``: offline schema validation of the manifests kubesage writes.
"""
