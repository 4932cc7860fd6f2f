"""What the GPU instances cost: the record each attempt leaves on its MLflow run (record), the prices it is
computed from (pricing, prices.json), the teardown's accounting of one attempt (accounting) and the report over
the runs of the last N days (report, chart: `gpu-runner cost-report`)."""
