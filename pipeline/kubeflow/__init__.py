"""Compiling for Kubeflow Pipelines v2 (the spec, import stand-ins) and talking to a KFP or Vertex
AI endpoint (submit, schedules)."""
