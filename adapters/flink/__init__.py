"""The Flink adapter: watch Flink's own signals over its REST API and act on them.

- ``client``, ``rest_models``, ``errors``: a typed REST client (httpx + tenacity);
- ``observation``, ``collector``, ``autoscaler``, ``autoscale_loop``: what is measured
  of a job, the REST collector that measures it, the pure scaling decision with its
  guard rails, and ``kubesage flink autoscale``'s stand-alone loop;
- ``loop_observe``, ``loop_scaling``, ``loop_rescale``, ``loop_clients``: the autoscaler
  in the core's control loop — the ``flink`` collector of the registered jobs, the
  ``flink-autoscaler`` reconciler (and the step the stand-alone loop shares), the
  ``flink-rescale`` actuator, and a REST client per JobManager;
- ``rescale``, ``operator_patch``: a decision applied in place through the adaptive
  scheduler, or as a FlinkDeployment patch;
- ``stagger``, ``stagger_search``: checkpoint phases across jobs (closed form, exact
  search); ``checkpoint_coordinator``, ``checkpoint_history``, ``checkpoint_settings``:
  the coordinator that triggers them, what Flink's history says about them, and the
  settings of jobs Flink checkpoints itself;
- ``state_tiering``: hot/cold state recommendations;
- ``submit``, ``registry``, ``flink_home``, ``cli``:
  ``kubesage flink submit|autoscale|stagger|state``.

A real local Flink cluster, a sample job with a known bottleneck and the experiments
built on them are test and benchmark code: ``benchmarks/flink_support`` in the
repository, not part of this package.
"""
