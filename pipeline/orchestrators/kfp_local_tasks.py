"""The `kfp-local` orchestrator: the pipeline compiled as for Kubeflow (the `kubeflow`
orchestrator's spec, in a fresh process), then run here under kfp.local, each task a process of
its own (pipeline/local/kfp_local.py); its report is read back from the tasks' directories.

Registered in pipeline/orchestrators/__init__.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.orchestrators import kubeflow_cluster

if TYPE_CHECKING:
    from pipeline.local.console import Console
    from pipeline.reporting.run_report import RunReport


class KfpLocalTasks:
    name = "kfp-local"
    help = "compile for Kubeflow, then run the spec under kfp.local here, each task a process"
    binding = kubeflow_cluster.ORCHESTRATOR.binding  # it runs the Kubeflow spec
    never_cached = kubeflow_cluster.ORCHESTRATOR.never_cached
    compile = None  # `lockstep compile` writes the spec it runs

    def run(self, prepared, console: Console) -> RunReport:
        from pipeline.local import kfp_local

        console.line("lockstep: compiling, then running the spec under kfp.local, each task a "
                     "process of its own")

        def task_line(record):
            console.line(f"  {record.task:<20} {'done' if record.succeeded else 'FAILED':<7} "
                         f"{record.seconds:6.1f}s (start-up {record.start_seconds:.1f}s)")

        return kfp_local.run_config(prepared.config, on_task=task_line).report()

    def past_runs(self, config, limit: int | None = None) -> list[RunReport]:
        """Its runs from their task directories under the pipeline root (kfp.local keeps no ML
        Metadata)."""
        from pipeline.local import kfp_local

        return kfp_local.past_runs(config.paths.pipeline_root)


ORCHESTRATOR = KfpLocalTasks()
