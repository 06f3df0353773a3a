"""Submits and schedules the compiled pipeline on Kubeflow Pipelines through `kfp.Client` (the
v2beta1 REST API), and turns whatever the server says into one line.

The cron of a recurring run is KFP's: six fields with seconds first (robfig/cron), in UTC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
from typing import Any, Callable

from runtime import exit_status

TOKEN_ENV = ("KF_PIPELINES_TOKEN", "KFP_TOKEN")
TOKEN_PATH_ENV = "KF_PIPELINES_SA_TOKEN_PATH"  # kfp's own: a projected service-account token file
HOST_ENV = "KF_PIPELINES_ENDPOINT"


class KfpError(RuntimeError):
    """What went wrong talking to KFP, as one line naming the host."""

    lockstep_exit_status = exit_status.FAILED


@dataclasses.dataclass(frozen=True)
class Target:
    host: str
    token: str = ""
    namespace: str = "kubeflow"
    experiment: str = "lockstep"
    service_account: str = ""


class UnsafeEndpoint(KfpError):
    """A host or token source that would leak the token; the message says which and why."""


LOOPBACK = ("localhost", "127.0.0.1", "::1")


def _is_loopback(hostname: str) -> bool:
    import ipaddress

    if hostname in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def resolve_host(flag: str | None, configured: str, with_token: bool) -> str:
    """--host, else $KF_PIPELINES_ENDPOINT, else kubeflow.host from the config.

    A token goes only where the person holding it pointed: a host named by --host or the
    environment, never one that a (shared) config file supplies; over https, or plain http to
    this machine (a port-forward)."""
    from urllib.parse import urlsplit

    environment = os.environ.get(HOST_ENV, "")
    host, source = ((flag, "--host") if flag else (environment, f"${HOST_ENV}") if environment
                    else (configured, "kubeflow.host"))
    if not host:
        raise KfpError(f"no KFP host: pass --host, set ${HOST_ENV}, or set kubeflow.host")
    host = host.rstrip("/")
    if not with_token:
        return host
    if source == "kubeflow.host":
        raise UnsafeEndpoint(f"kubeflow.host {host} comes from the config file, and the token "
                             f"is sent only to a host you name: pass --host or set ${HOST_ENV}")
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeEndpoint(f"{source} {host}: give the endpoint as https://HOST[:PORT]")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise UnsafeEndpoint(f"{source} {host}: plain http would send the token in the clear; "
                             "use https, or plain http only to this machine (a port-forward)")
    return host


def resolve_token(token_file: str | None, stdin=None) -> str:
    """--token-file (a path, or - for stdin), else $KF_PIPELINES_TOKEN / $KFP_TOKEN, else the
    file $KF_PIPELINES_SA_TOKEN_PATH. Never a flag's value: argv is visible to every user in
    `ps` and lands in shell history."""
    import sys

    if token_file == "-":
        return (stdin or sys.stdin).readline().strip()
    path, what = token_file, "--token-file"
    if not path:
        token = next((os.environ[name] for name in TOKEN_ENV if os.environ.get(name)), "")
        if token:
            return token.strip()
        path, what = os.environ.get(TOKEN_PATH_ENV, ""), f"${TOKEN_PATH_ENV}"
    if not path:
        return ""
    try:
        if what == "--token-file" and os.stat(path).st_mode & 0o077:
            # As ssh refuses a private key others can read: the token is the user's identity.
            raise KfpError(f"{what} {path}: readable by other users (mode "
                           f"{os.stat(path).st_mode & 0o777:o}); chmod 600 it")
        with open(path) as handle:
            return handle.read().strip()
    except OSError as err:
        raise KfpError(f"{what} {path}: {err.strerror}") from None


def _server_message(body: Any) -> str:
    try:
        data = json.loads(body)
        text = data.get("message") or data.get("error") or ""
    except (TypeError, ValueError, AttributeError):
        text = body.decode() if isinstance(body, bytes) else str(body or "")
    return " ".join(text.split())[:300]


def _call(target: Target, what: str, fn: Callable[[], Any]) -> Any:
    import kfp_server_api
    import urllib3

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # kfp prints its own links; we print ours
            return fn()
    except kfp_server_api.ApiException as err:
        status, message = err.status, _server_message(err.body)
        if status in (401, 403):
            hint = "pass --token-file or set $KF_PIPELINES_TOKEN" if not target.token else \
                "the token was refused"
            raise KfpError(f"KFP at {target.host} refused to {what}: {status} {err.reason} "
                           f"({hint})") from None
        if status == 404:
            raise KfpError(f"KFP at {target.host} could not {what}: 404 Not Found"
                           f"{': ' + message if message else ''} (is --host the KFP API "
                           "endpoint, and does the id exist?)") from None
        if status in (400, 409, 422):
            raise KfpError(f"KFP at {target.host} rejected the request to {what}: {status} "
                           f"{err.reason}: {message}") from None
        raise KfpError(f"KFP at {target.host} failed to {what}: {status} {err.reason}"
                       f"{': ' + message if message else ''}") from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise KfpError(f"cannot reach KFP at {target.host} to {what}: "
                       f"{str(reason).splitlines()[0]}") from None


def connect(target: Target):
    import kfp

    # A namespace keeps the client from polling healthz (5 tries, 5 s apart) when it starts.
    return _call(target, "connect", lambda: kfp.Client(
        host=target.host, existing_token=target.token or None,
        namespace=target.namespace or "kubeflow"))


def _experiment_id(client, target: Target) -> str:
    experiment = _call(target, f"find or create experiment '{target.experiment}'",
                       lambda: client.create_experiment(target.experiment,
                                                        namespace=target.namespace or None))
    return experiment.experiment_id


def run_url(target: Target, run_id: str) -> str:
    return f"{target.host}/#/runs/details/{run_id}"


def submit(target: Target, package: str, run_name: str, params: dict[str, Any],
           pipeline_root: str | None = None) -> str:
    """Creates a run; returns its id."""
    client = connect(target)
    experiment_id = _experiment_id(client, target)
    result = _call(target, "create the run", lambda: client.create_run_from_pipeline_package(
        package, arguments=params, run_name=run_name, experiment_id=experiment_id,
        pipeline_root=pipeline_root, service_account=target.service_account or None))
    return result.run_id


def validate_cron(cron: str) -> str:
    fields = cron.split()
    if len(fields) == 5:
        raise KfpError(f"--cron {cron!r} has 5 fields; KFP's cron has 6, seconds first "
                       f"(try '0 {cron}')")
    if len(fields) != 6:
        raise KfpError(f"--cron {cron!r} must have 6 fields: second minute hour day month weekday")
    return " ".join(fields)


def schedule(target: Target, package: str, name: str, cron: str, params: dict[str, Any],
             max_concurrency: int = 1, catch_up: bool = False,
             pipeline_root: str | None = None, client=None, description: str | None = None) -> str:
    """Creates a recurring run; returns its id."""
    cron = validate_cron(cron)
    if max_concurrency < 1:
        raise KfpError(f"--max-concurrency must be at least 1, got {max_concurrency}")
    client = client or connect(target)
    experiment_id = _experiment_id(client, target)
    job = _call(target, "create the recurring run", lambda: client.create_recurring_run(
        experiment_id=experiment_id, job_name=name, cron_expression=cron,
        max_concurrency=max_concurrency, no_catchup=not catch_up, pipeline_package_path=package,
        params=params, pipeline_root=pipeline_root,
        service_account=target.service_account or None, description=description))
    return job.recurring_run_id


APPLIED = "lockstep-apply "  # a recurring run's description: this, then the digest of its definition


def _definition_digest(target: Target, package: str, cron: str, params: dict[str, Any],
                       max_concurrency: int, catch_up: bool, pipeline_root: str | None) -> str:
    import hashlib
    import json

    with open(package, "rb") as handle:
        spec = handle.read()
    settings = json.dumps({"cron": validate_cron(cron), "params": params,
                           "max_concurrency": max_concurrency, "catch_up": catch_up,
                           "pipeline_root": pipeline_root, "experiment": target.experiment,
                           "service_account": target.service_account}, sort_keys=True)
    return "sha256:" + hashlib.sha256(spec + b"\0" + settings.encode()).hexdigest()


def apply_schedule(target: Target, package: str, name: str, cron: str, params: dict[str, Any],
                   max_concurrency: int = 1, catch_up: bool = False,
                   pipeline_root: str | None = None) -> tuple[str, str, list[str]]:
    """Makes the recurring run named `name` match this definition (spec, parameters, cron,
    concurrency, catch-up, root, experiment, service account), KFP having no update: none, it is
    created; one carrying the same definition's digest, nothing happens; otherwise the old one is
    paused, the new one created, then the old one deleted, so the schedule is never doubled and
    never missing. Returns (created | unchanged | replaced, the id in force, the ids removed)."""
    digest = _definition_digest(target, package, cron, params, max_concurrency, catch_up,
                                pipeline_root)
    client = connect(target)
    named = [s for s in list_schedules(target, client) if s.name == name]
    same = [s for s in named if s.description == APPLIED + digest]
    if same and len(named) == 1:
        return "unchanged", same[0].id, []
    for old in named:
        if old.status != "DISABLED":
            change_schedule(target, "pause", old.id, client)
    new_id = schedule(target, package, name, cron, params, max_concurrency, catch_up,
                      pipeline_root, client, description=APPLIED + digest)
    for old in named:
        change_schedule(target, "delete", old.id, client)
    return ("replaced" if named else "created"), new_id, [s.id for s in named]


@dataclasses.dataclass(frozen=True)
class Schedule:
    id: str
    name: str
    status: str
    cron: str
    max_concurrency: str
    description: str = ""


def list_schedules(target: Target, client=None) -> list[Schedule]:
    client = client or connect(target)
    out, token = [], ""
    while True:
        page = _call(target, "list recurring runs", lambda token=token: client.list_recurring_runs(
            page_token=token, page_size=100, namespace=target.namespace or None))
        for job in page.recurring_runs or []:
            cron = job.trigger.cron_schedule.cron if job.trigger and job.trigger.cron_schedule else ""
            out.append(Schedule(job.recurring_run_id, job.display_name, str(job.status or ""),
                                cron, str(job.max_concurrency or ""), job.description or ""))
        token = page.next_page_token
        if not token:
            return out


def change_schedule(target: Target, action: str, schedule_id: str, client=None) -> None:
    client = client or connect(target)
    fn = {"pause": client.disable_recurring_run, "resume": client.enable_recurring_run,
          "delete": client.delete_recurring_run}[action]
    _call(target, f"{action} recurring run {schedule_id}", lambda: fn(schedule_id))


def parse_params(pairs: list[str], declared: dict[str, str]) -> dict[str, Any]:
    """k=v pairs typed by the spec's root inputs ({name: INT | DOUBLE | STRING | ...})."""
    params: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise KfpError(f"--param {pair!r}: use name=value")
        if name not in declared:
            raise KfpError(f"--param {name}: not a pipeline parameter "
                           f"(known: {', '.join(sorted(declared))})")
        kind = declared[name]
        try:
            params[name] = int(raw) if kind in ("INT", "NUMBER_INTEGER") else \
                float(raw) if kind in ("DOUBLE", "NUMBER_DOUBLE") else raw
        except ValueError:
            raise KfpError(f"--param {name}={raw}: must be {kind.lower()}") from None
    return params


def declared_parameters(package: str) -> dict[str, str]:
    """The root input parameters of a compiled spec and their types."""
    import yaml

    try:
        with open(package) as handle:
            spec = next(yaml.safe_load_all(handle))
        parameters = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration) as err:
        raise KfpError(f"{package}: not a compiled pipeline spec ({err})") from None
    return {name: p.get("parameterType") or p.get("type", "STRING") for name, p in parameters.items()}


def _has_google_credentials() -> bool:
    """Application default credentials we can see without asking the network: a key file, the
    gcloud ADC file, or a Google runtime (GCE/GKE) whose metadata server serves them."""
    adc = os.path.join(os.environ.get("CLOUDSDK_CONFIG") or os.path.expanduser("~/.config/gcloud"),
                       "application_default_credentials.json")
    return bool(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.path.exists(adc)
                or os.environ.get("GCE_METADATA_HOST") or os.environ.get("KUBERNETES_SERVICE_HOST"))


def submit_vertex(package: str, project: str, region: str, run_name: str,
                  params: dict[str, Any], pipeline_root: str, service_account: str = "") -> str:
    """Creates a Vertex AI Pipelines job from the spec (Vertex takes the PipelineSpec document;
    the Kubernetes platform document is for KFP on GKE)."""
    import tempfile

    import yaml

    if not _has_google_credentials():
        raise KfpError("no Google Cloud credentials for Vertex AI: run `gcloud auth "
                       "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS")
    if not pipeline_root.startswith("gs://"):
        raise KfpError(f"Vertex AI needs a gs:// pipeline root, got {pipeline_root} "
                       "(paths.pipeline_root or --pipeline-root)")

    with open(package) as handle:
        spec = next(yaml.safe_load_all(handle))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(spec, handle)
        single = handle.name
    try:
        from google.api_core import exceptions as api_exceptions
        from google.auth import exceptions as auth_exceptions
        from google.cloud import aiplatform

        try:
            aiplatform.init(project=project, location=region)
            job = aiplatform.PipelineJob(display_name=run_name, template_path=single,
                                         job_id=run_name, pipeline_root=pipeline_root,
                                         parameter_values=params, enable_caching=None)
            job.submit(service_account=service_account or None)
        except (auth_exceptions.GoogleAuthError, api_exceptions.GoogleAPIError) as err:
            raise KfpError(f"Vertex AI ({project}, {region}) refused the job: "
                           f"{str(err).splitlines()[0]}") from None
        return job.resource_name
    finally:
        os.unlink(single)
