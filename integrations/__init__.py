"""Where users already work: integrations that read or drive the suite from outside Spark.

* `tables.py`: the jobs' Delta tables read with delta-rs (`deltalake`), never Spark;
* `verdicts.py`: the one reader of the verdict (OK / LOSS / DUPLICATION / INCOMPLETE) the
  cross-tier audit writes to `audit_verdicts`; nothing here decides one;
* `query.py`: `python -m integrations.query` runs SQL over the tables (docs/query.md);
* `report/`: `python -m integrations.report` writes the completeness report (docs/report.md);
* `notifier.py`: a webhook notifier for LOSS verdicts and WARN/STALL/STOP groups (docs/metrics.md);
* `airflow/`: the Airflow provider, in its own venv (docs/airflow.md).

No module here imports pyspark, and neither jobs/ nor controlplane/ imports this room.
"""
