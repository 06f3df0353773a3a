"""`lockstep submit`, `schedule` and `schedules`: the pipeline on a Kubeflow Pipelines server (or
Vertex AI Pipelines): one run, a recurring run made to match, and the recurring runs listed,
paused, resumed or deleted. `KfpAccess` says which server, as who, where.

It talks to the server and nothing else: the spec is a `lockstep compile` output or one compiled
now in a fresh process and removed after. A bearer token goes only to a host the user named, and
never over plain HTTP (pipeline/kubeflow/client.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Iterator

from pipeline.config import Config, ConfigError

if TYPE_CHECKING:
    from pipeline.kubeflow.client import Schedule, Target


@dataclasses.dataclass(frozen=True)
class KfpAccess:
    """Which KFP server, as who, where: what the flags say (None: the config's value, or the
    environment's; pipeline/kubeflow/client.py resolves host and token)."""

    host: str | None = None
    token_file: str | None = None  # a file holding the bearer token, or "-" for stdin
    namespace: str | None = None
    experiment: str | None = None
    service_account: str | None = None


def kfp_target(config: Config, access: KfpAccess) -> Target:
    """The KFP server to talk to (kubeflow/client.py's Target).

    Raises:
      ConfigError: a token would go to a host the user did not name, or over plain HTTP.
    """
    from pipeline.kubeflow import client

    k = config.kubeflow
    token = client.resolve_token(access.token_file)
    try:
        host = client.resolve_host(access.host, k.host, with_token=bool(token))
    except client.UnsafeEndpoint as err:
        raise ConfigError(str(err)) from None
    return client.Target(host=host, token=token, namespace=access.namespace or k.namespace,
                         experiment=access.experiment or k.experiment,
                         service_account=access.service_account or k.service_account)


@contextlib.contextmanager
def spec_package(config: Config, package: str | None = None,
                 image: str | None = None) -> Iterator[str]:
    """The spec to send: `package` (a `lockstep compile` output), or one compiled now in a
    fresh process and removed after."""
    if package:
        yield package
        return
    from pipeline.kubeflow import compiler

    directory = tempfile.mkdtemp(prefix="lockstep-")
    try:
        path = os.path.join(directory, "pipeline.yaml")
        compiler.compile_in_fresh_process(config, path, image=image)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_parameters(package: str, pairs: list[str] | None) -> dict[str, Any]:
    """NAME=VALUE pairs as the spec's declared parameters, typed.

    Raises:
      ConfigError: a name the spec does not declare, or a value of the wrong type.
    """
    from pipeline.kubeflow import client

    try:
        return client.parse_params(pairs, client.declared_parameters(package))
    except client.KfpError as err:
        raise ConfigError(str(err)) from None


@dataclasses.dataclass(frozen=True)
class Submitted:
    run_id: str
    run_name: str
    where: str  # the experiment, or Vertex AI
    url: str = ""


def submit(config: Config, access: KfpAccess, *, package: str | None = None,
           image: str | None = None, params: list[str] | None = None,
           pipeline_root: str | None = None, run_name: str | None = None,
           vertex: tuple[str, str] | None = None) -> Submitted:
    """One run of the pipeline on KFP, or on Vertex AI Pipelines (vertex: project, region).

    Raises:
      ConfigError: a bad parameter or endpoint; KfpError: the server refused or failed.
    """
    from datetime import datetime, timezone

    from pipeline.kubeflow import client

    run_name = run_name or f"{config.pipeline_name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    with spec_package(config, package, image) as spec:
        values = run_parameters(spec, params)
        if vertex:
            name = client.submit_vertex(spec, *vertex, run_name, values,
                                        pipeline_root or config.paths.pipeline_root,
                                        access.service_account or config.kubeflow.service_account)
            return Submitted(name, run_name, "Vertex AI Pipelines")
        target = kfp_target(config, access)
        run_id = client.submit(target, spec, run_name, values, pipeline_root)
    return Submitted(run_id, run_name, target.experiment, client.run_url(target, run_id))


@dataclasses.dataclass(frozen=True)
class Scheduled:
    name: str
    job_id: str
    action: str = "created"  # with apply: created | unchanged | replaced
    replaced: tuple[str, ...] = ()


def schedule(config: Config, access: KfpAccess, cron: str, *, name: str | None = None,
             max_concurrency: int = 1, catch_up: bool = False, apply: bool = False,
             package: str | None = None, image: str | None = None,
             params: list[str] | None = None, pipeline_root: str | None = None) -> Scheduled:
    """A recurring run on KFP (cron: 6 fields, UTC). apply: make the recurring run of this name
    match: create it, leave it, or replace it.

    Raises:
      ConfigError: a bad cron, parameter or endpoint; KfpError: the server refused or failed.
    """
    from pipeline.kubeflow import client

    name = name or f"{config.pipeline_name}-retrain"
    with spec_package(config, package, image) as spec:
        values = run_parameters(spec, params)
        target = kfp_target(config, access)
        if apply:
            action, job_id, removed = client.apply_schedule(
                target, spec, name, cron, values, max_concurrency, catch_up, pipeline_root)
            return Scheduled(name, job_id, action, tuple(removed))
        job_id = client.schedule(target, spec, name, cron, values, max_concurrency, catch_up,
                                 pipeline_root)
    return Scheduled(name, job_id)


def schedules(config: Config, access: KfpAccess, action: str = "list",
              schedule_id: str | None = None) -> list[Schedule]:
    """list: the recurring runs (kubeflow/client.py's Schedule); pause | resume | delete: that
    one (returns [])."""
    from pipeline.kubeflow import client

    target = kfp_target(config, access)
    if action == "list":
        return client.list_schedules(target)
    client.change_schedule(target, action, schedule_id)
    return []
