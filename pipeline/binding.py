"""What the pipeline definition needs to know of the orchestrator that runs it, and no more.

pipeline/definition.py takes a Binding, never an orchestrator's name; each orchestrator
(pipeline/orchestrators/) has one. Light: TFX loads only when a runtime parameter is made."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Binding:
    """run_parameters: the data root, the trainer's RUN_PARAMETERS and a Vertex job's settings
    become runtime parameters a run can override (Kubeflow's pipeline parameters); else their
    values are compiled in. local_metadata: ML Metadata in config.metadata_path (SQLite); else
    the orchestrator keeps its own (KFP's) or none."""

    run_parameters: bool = False
    local_metadata: bool = True

    def parameter(self, name: str, ptype: type, value):
        """`value`, or a runtime parameter of that name defaulting to it."""
        if not self.run_parameters:
            return value
        from tfx.orchestration.data_types import RuntimeParameter

        return RuntimeParameter(name=name, ptype=ptype, default=value)


HERE = Binding()  # an orchestrator in this process: values compiled in, ML Metadata in SQLite
COMPILED = Binding(run_parameters=True, local_metadata=False)  # a spec a cluster (or kfp.local) runs
