"""Talking to Vertex AI's job service for the Trainer's job (components/vertex_training.py): the
client for a region, an API error as one line naming the setting it is about (`refused`), and
what a failed job's error says (no capacity, preempted)."""

from __future__ import annotations

import re

from components.vertex_job import VertexError, VertexSettings

TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
            "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED")



def client(settings: VertexSettings):
    """The Vertex job service for the settings' region (REST; a loopback stand-in in tests)."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    endpoint = settings.api_endpoint or f"https://{settings.region}-aiplatform.googleapis.com"
    options = {"api_endpoint": endpoint}
    if endpoint.startswith("http://"):  # a stand-in on loopback: no Google credentials
        from google.auth.credentials import AnonymousCredentials

        return JobServiceClient(credentials=AnonymousCredentials(), transport="rest",
                                client_options=options)
    return JobServiceClient(transport="rest", client_options=options)


def refused(err: Exception, settings: VertexSettings) -> VertexError:
    """An API error (google.api_core's, by HTTP status over REST) as one line naming the setting
    it is about."""
    message = (getattr(err, "message", "") or str(err)).strip()
    message = re.sub(r"^[A-Z]+ \S+: ", "", message.splitlines()[0] if message else "")
    status = getattr(err, "code", None)  # an HTTPStatus over REST (a gRPC code over gRPC)
    http = int(status) if isinstance(status, int) else 0
    grpc_name = getattr(getattr(err, "grpc_status_code", None), "name", "")
    words = message.lower()
    machines = (f"{settings.gpus.accelerator} GPUs on {settings.gpus.machine_type}"
                if settings.gpus else f"{settings.tpu_slice} TPU VMs")
    if http == 429 or grpc_name == "RESOURCE_EXHAUSTED":
        about = (f"quota for {machines} in vertex.region={settings.region} "
                 f"(project {settings.project})")
    elif http in (401, 403) or grpc_name in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        about = (f"vertex.service_account={settings.service_account or '(the default)'} in "
                 f"vertex.project={settings.project}")
    elif "topology" in words and not settings.gpus:
        about = f"trainer.tpu_slice={settings.tpu_slice}"
    elif "accelerator" in words and settings.gpus:
        about = (f"trainer.gpu_machine_type={settings.gpus.machine_type}, "
                 f"trainer.gpu_accelerator={settings.gpus.accelerator}")
    elif "region" in words or "location" in words:
        about = f"vertex.region={settings.region}"
    else:
        about = settings.where()
    name = grpc_name or getattr(status, "name", "") or type(err).__name__
    return VertexError(f"Vertex AI refused the Trainer's job ({about}): {name}: "
                       f"{message or type(err).__name__}",
                       capacity=(http == 429 or grpc_name == "RESOURCE_EXHAUSTED"
                                 or _says_no_capacity(words)))


def _says_no_capacity(words: str) -> bool:
    return any(w in words for w in ("capacity", "stockout", "insufficient", "not enough resources",
                                    "enough resources available", "quota"))


def no_capacity(job) -> bool:
    """A job that failed because Vertex had no machines (or no quota) for it."""
    return job.error.code == 8 or _says_no_capacity((job.error.message or "").lower())  # 8: RESOURCE_EXHAUSTED


def preempted(job) -> bool:
    """A job that failed because its machines were taken away (worth submitting again)."""
    text = (job.error.message or "").lower()
    return job.error.code == 14 or "preempt" in text  # 14: UNAVAILABLE
