"""`gpu-runner pr-comment`: the report of a training branch's runs on its pull request."""
