"""Evaluations on a Ray cluster: an optional extra, `pip install 'kernelswarm[cluster]'`.

A goal with a [cluster] table (or `kernelswarm run --cluster ADDRESS`) gets a ClusterEvaluator:
worker actors on the cluster's nodes, each holding the same local evaluator a workstation uses
(the sandboxed cascade in its own worker process). Without a [cluster] table nothing here is
imported and Ray never is: Ray is imported only inside app.cluster.connect.
"""
