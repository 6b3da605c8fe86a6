"""The Flink adapter: watch Flink's own signals over its REST API and act on them.

- ``client``, ``rest_models``, ``errors``: a typed REST client (httpx + tenacity);
- ``autoscaler``, ``rescale``, ``operator_patch``: backpressure-driven parallelism,
  applied in place through the adaptive scheduler or as a FlinkDeployment patch;
- ``stagger``, ``checkpoint_coordinator``: checkpoint phases across jobs and the
  coordinator that triggers them;
- ``state_tiering``: hot/cold state recommendations;
- ``submit``, ``registry``, ``cli``: ``kubesage flink submit|autoscale|stagger|state``;
- ``local_cluster``, ``sample_job``, ``sample_runs``: a real local Flink session
  cluster, a job with a known bottleneck, and registered copies of it, for the tests
  and benchmarks.
"""
