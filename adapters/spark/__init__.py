"""The Spark adapter: event logs, a shuffle cost model over the DRTG, rack-aware
executor placement, and the spark-submit conf and pod templates that carry it out
(``kubesage spark conf|submit``)."""
