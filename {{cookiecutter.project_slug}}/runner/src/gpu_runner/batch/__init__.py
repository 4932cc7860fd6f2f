"""The AWS Batch backend: its stack, job submission, source bundles, waiting, and the jobs' costs."""
