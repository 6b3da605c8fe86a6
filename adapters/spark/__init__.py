"""The Spark adapter: event logs, a shuffle cost model over the DRTG, rack-aware
executor placement, and the spark-submit conf and pod templates that carry it out
(``kubesage spark conf|submit``); in the control loop, ``spark-placement``
(``loop_placement.py``) binds pending executors on the live DRTG.

Modules: ``eventlog`` (event logs → stages and shuffle bytes), ``shuffle_model``
(expected cross-rack bytes of a placement), ``placement`` (the placement and its
baselines), ``job_hints`` (input locality hints and the default traffic shape),
``conf`` (spark-submit conf and pod templates), ``cli`` (the commands and the
adapter object), ``loop_placement`` (the ``spark-placement`` reconciler),
``tpch_job`` (a PySpark job for real event logs).
"""
