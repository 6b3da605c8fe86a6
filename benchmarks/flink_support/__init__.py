"""A real Flink session cluster and the experiments the Flink benchmarks and tests share.

- ``cluster``: a local Flink session cluster from the Flink venv (``make services``);
- ``sample_job``: a PyFlink job with a known bottleneck, run with ``flink run -py``
  (it runs in the Flink venv and is never imported here);
- ``samples``: registered copies of the sample job, submitted as ``kubesage flink
  submit`` does;
- ``stagger_harness``: checkpoints on a stagger plan against all at once.

None of this ships in the kubesage package. It lives beside the benchmarks because
both of its users can import it as they run: ``python benchmarks/flink_*.py`` puts
``benchmarks/`` on ``sys.path`` (``import flink_support``), and pytest puts the
repository root there (``import benchmarks.flink_support``). Its modules import each
other relatively, so they work under either name.
"""
