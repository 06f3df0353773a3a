"""The `kubeflow` orchestrator: the pipeline compiled to a Kubeflow Pipelines v2 spec
(pipeline/kubeflow/compiler.py), which `lockstep submit` sends to a cluster; it runs nothing here.

Registered in pipeline/orchestrators/__init__.py; `lockstep compile` writes its spec, and the
`kfp-local` orchestrator runs the same spec here."""

from __future__ import annotations

from pipeline.binding import COMPILED
from pipeline.node_ids import BASELINE_NODE, EXAMPLE_GEN_NODE

# Never served from KFP's cache: LatestPushedModel looks in the serving dir, outside the
# pipeline; and the ExampleGen, whose files can change under the same data root (a new span):
# open-source KFP runs no driver and keys its cache on the task's inputs alone, so a new span
# would hit it.
NEVER_CACHED = (EXAMPLE_GEN_NODE, BASELINE_NODE)


class KubeflowCluster:
    name = "kubeflow"
    help = "a Kubeflow Pipelines v2 spec, submitted to a cluster (lockstep compile / submit)"
    binding = COMPILED
    never_cached = NEVER_CACHED
    run = None
    past_runs = None  # on the cluster: `lockstep schedules`, the KFP UI

    def compile(self, config, decisions, image: str | None = None):
        """The compiled spec (pipeline/kubeflow/compiler.py, Compiled)."""
        from pipeline.kubeflow import compiler

        return compiler.compile_pipeline(config, decisions, image, binding=self.binding,
                                         never_cached=self.never_cached)


ORCHESTRATOR = KubeflowCluster()
