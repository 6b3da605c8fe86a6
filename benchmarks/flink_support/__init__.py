"""A real Flink session cluster and the experiments the Flink benchmarks and tests share.

- ``cluster``: a local Flink session cluster from the Flink venv (``make services``);
- ``sample_job``: a PyFlink job with a known bottleneck, run with ``flink run -py``
  (it runs in the Flink venv and is never imported here);
- ``samples``: registered copies of the sample job, submitted as ``kubesage flink
  submit`` does;
- ``stagger_harness``: checkpoints on a stagger plan against all at once;
  ``io_sampler``: the checkpoint directory's bytes over time; ``state_job``: a SQL job
  with a set amount of keyed state (checkpoints that write);
- ``shape_jobs`` (a PyFlink script, like ``sample_job``) and ``shape_harness``: job
  shapes the autoscaler was not written for, and the autoscaler run on each until calm;
- ``rate_schedule``, ``ramp_harness``, ``ramp_scenario``: a job whose input rate follows
  a schedule, scaled reactively and with a forecast side by side.

None of this ships in the kubesage package. It lives beside the benchmarks because
both of its users can import it as they run: ``python benchmarks/flink_*.py`` puts
``benchmarks/`` on ``sys.path`` (``import flink_support``), and pytest puts the
repository root there (``import benchmarks.flink_support``). Its modules import each
other relatively, so they work under either name.
"""
