"""A multi-host TPU slice's Trainer: compiled as a task that submits a Vertex AI custom job and
waits for it (components/vertex_training.py), checked against a stand-in of Vertex's API
(tests/vertex_standin.py) and with the SDK's own types; no cloud."""

import base64
import json

import pytest
from google.cloud.aiplatform_v1.types import CustomJob
from google.protobuf import json_format
from tfx.types import artifact_utils, standard_artifacts

from components import entrypoint, vertex_job, vertex_training
from pipeline import config as config_lib, orchestrators, preflight
from trainer_module import slices
from vertex_standin import VertexStandIn

LAUNCHABLE = [name for name, tpu in slices.PRESETS.items()
              if not tpu.single_host and name.startswith("v5e")]
REFUSED = [name for name, tpu in slices.PRESETS.items()
           if not tpu.single_host and not name.startswith("v5e")]


def _config(**values):
    return config_lib.load(None, {"data.path": "gs://b/d", "paths.pipeline_root": "gs://b/r",
                                  "data.task": "classification", "eval.bounds": {"accuracy": 0.8},
                                  **values})


def test_v5e_16_compiles_to_a_cpu_task_whose_settings_are_run_parameters():
    config = _config(**{"trainer.tpu_slice": "v5e-16", "vertex.project": "acme",
                        "vertex.region": "europe-west4"})
    compiled = orchestrators.get("kubeflow").compile(config, preflight.decide(config), "img@sha256:abc")
    spec = compiled.pipeline_spec
    label = spec.components["Trainer"].executor_label
    container = json_format.MessageToDict(spec.deployment_spec)["executors"][label]["container"]
    args = container["args"]
    assert args[args.index("--executor_class_path") + 1] == "components.vertex_training.Executor"
    assert container["command"] == list(entrypoint.COMMAND)
    assert "accelerator" not in container["resources"]  # the task waits on a CPU node
    assert label not in compiled.platform_spec.platforms["kubernetes"].deployment_spec.executors
    params = {name: json_format.MessageToDict(p.default_value)
              for name, p in spec.root.input_definitions.parameters.items()}
    assert {k: v for k, v in params.items() if k.startswith("vertex_")} == {
        "vertex_project": "acme", "vertex_region": "europe-west4",
        "vertex_service_account": "", "vertex_network": ""}
    trainer = spec.root.dag.tasks["Trainer"].inputs.parameters
    assert trainer["vertex_region"].component_input_parameter == "vertex_region"
    constants = {name: json_format.MessageToDict(p.runtime_value.constant)
                 for name, p in trainer.items() if p.HasField("runtime_value")}
    assert constants["vertex_image"] == "img@sha256:abc"
    assert constants["vertex_tpu_slice"] == "v5e-16"
    custom = json.loads(constants["custom_config"])
    # The user's settings whole: the Trainer resolves a slice's strategy itself (strategy.py).
    assert (custom["trainer"]["strategy"], custom["trainer"]["tpu"],
            custom["trainer"]["tpu_slice"]) == ("auto", "", "v5e-16")


@pytest.mark.parametrize("name", REFUSED)
def test_a_slice_vertex_cannot_launch_is_refused_at_compile_with_the_reason(name):
    from pipeline.kubeflow import compiler

    config = _config(**{"trainer.tpu_slice": name})
    with pytest.raises(compiler.CompileError, match=rf"trainer.tpu_slice={name} spans \d+ hosts, "
                                                    r"so its Trainer runs as a Vertex AI custom "
                                                    r"job, but .*(TensorFlow 2.16 does not run "
                                                    r"on v6e|offers no v[45]p? slices)"):
        orchestrators.get("kubeflow").compile(config, preflight.decide(config), "img:1")


def _task(tmp_path, endpoint: str, tpu_slice: str = "v5e-16", **changes):
    """The Vertex Trainer task's artifacts and properties, as its executor gets them."""
    def artifact(kind, name):
        made = kind()
        made.uri = str(tmp_path / name)
        return [made]

    inputs = {"examples": artifact(standard_artifacts.Examples, "examples"),
              "transform_graph": artifact(standard_artifacts.TransformGraph, "transform"),
              "schema": artifact(standard_artifacts.Schema, "schema")}
    outputs = {"model": artifact(standard_artifacts.Model, "model"),
               "model_run": artifact(standard_artifacts.ModelRun, "model_run")}
    properties = {"run_fn": "trainer_module.run_fn.run_fn", "custom_config": "{}",
                  "train_steps": 100, vertex_job.PROJECT: "acme",
                  vertex_job.REGION: "europe-west4",
                  vertex_job.SERVICE_ACCOUNT: "trainer@acme.iam.gserviceaccount.com",
                  vertex_job.NETWORK: "projects/12/global/networks/vpc",
                  vertex_job.IMAGE: "europe-docker.pkg.dev/acme/lockstep@sha256:abc",
                  vertex_job.TPU_SLICE: tpu_slice, vertex_job.API_ENDPOINT: endpoint,
                  vertex_job.POLL_SECONDS: 0.01, vertex_job.RESUBMITS: 2, **changes}
    return inputs, outputs, properties


def _run(tmp_path, standin, **changes):
    inputs, outputs, properties = _task(tmp_path, standin.endpoint, **changes)
    vertex_training.Executor().Do(inputs, outputs, properties)
    return inputs, outputs, properties


@pytest.mark.parametrize("name", LAUNCHABLE)
def test_the_job_submitted_for_each_slice_vertex_can_launch(tmp_path, name):
    """Checked by the SDK's types (a strict parse of what reached the API) and field by field:
    one worker pool of one replica on the slice's machine type and topology, the pipeline image's
    entrypoint running the plain Trainer executor on the task's own artifacts; the job was
    reported running, then succeeded, and the task ends."""
    tpu = slices.get(name)
    with VertexStandIn() as standin:
        inputs, outputs, properties = _run(tmp_path, standin, vertex_tpu_slice=name)
    [body] = standin.creates()
    job = CustomJob.from_json(json.dumps(body))  # unknown or mistyped fields fail here
    [pool] = job.job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.tpu_topology) == (
        "ct5lp-hightpu-4t", tpu.topology)
    assert pool.replica_count == 1 and tpu.hosts == tpu.chips // 4
    container = pool.container_spec
    assert container.image_uri == "europe-docker.pkg.dev/acme/lockstep@sha256:abc"
    assert list(container.command) == list(entrypoint.COMMAND)
    assert [(e.name, e.value) for e in container.env] == [("TF_USE_LEGACY_KERAS", "1")]
    args = list(container.args)
    assert args[:2] == ["--executor_class_path", "components.trainer.Executor"]

    def decoded(flag):
        return base64.b64decode(args[args.index(flag) + 1]).decode()

    assert [a.uri for a in artifact_utils.parse_artifact_dict(decoded("--inputs-base64"))[
        "examples"]] == [inputs["examples"][0].uri]
    assert artifact_utils.parse_artifact_dict(decoded("--outputs-base64"))["model"][0].uri == \
        outputs["model"][0].uri
    assert json.loads(decoded("--exec-properties-base64")) == {
        "run_fn": "trainer_module.run_fn.run_fn", "custom_config": "{}", "train_steps": 100}
    assert job.job_spec.service_account == "trainer@acme.iam.gserviceaccount.com"
    assert job.job_spec.network == "projects/12/global/networks/vpc"
    assert job.job_spec.scheduling.restart_job_on_worker_restart
    paths = [(r["method"], r["path"]) for r in standin.requests]
    assert paths[0] == ("POST", "/v1/projects/acme/locations/europe-west4/customJobs")
    assert paths[1:] == [("GET", "/v1/projects/acme/locations/europe-west4/customJobs/1")] * 2
    record = json.loads((tmp_path / "model_run" / vertex_job.JOB_RECORD).read_text())
    assert record == {"name": "projects/acme/locations/europe-west4/customJobs/1",
                      "tpu_slice": name}


def test_a_preempted_job_is_submitted_again_and_a_retried_task_waits_for_its_job(tmp_path):
    preempted = [{"state": "JOB_STATE_RUNNING"},
                 {"state": "JOB_STATE_FAILED",
                  "error": {"code": 14, "message": "The TPU VMs were preempted"}}]
    with VertexStandIn() as standin:
        standin.scripts = [preempted]
        _run(tmp_path, standin)
        assert len(standin.creates()) == 2  # the second ran to success
        # A KFP retry of the task (its pod evicted while it waited) finds the job it submitted.
        standin.jobs["projects/acme/locations/europe-west4/customJobs/2"]["script"] = [
            {"state": "JOB_STATE_RUNNING"}, {"state": "JOB_STATE_SUCCEEDED"}]
        standin.jobs["projects/acme/locations/europe-west4/customJobs/2"]["state"] = \
            "JOB_STATE_RUNNING"
        _run(tmp_path, standin)
        assert len(standin.creates()) == 2


def test_a_failed_job_is_one_line_naming_it(tmp_path):
    failed = [{"state": "JOB_STATE_FAILED",
               "error": {"code": 13, "message": "ValueError: label 'y' is not among the raw "
                                                "features"}}]
    with VertexStandIn(script=failed) as standin, pytest.raises(
            vertex_job.VertexError, match=r"^Vertex AI job projects/acme/locations/"
                                               r"europe-west4/customJobs/1 ended "
                                               r"JOB_STATE_FAILED: ValueError: label 'y' is not "
                                               r"among the raw features$"):
        _run(tmp_path, standin)


@pytest.mark.parametrize("status, name, message, names", [
    (429, "RESOURCE_EXHAUSTED", "Quota exceeded for TPU v5 lite pod cores",
     "quota for v5e-16 TPU VMs in vertex.region=europe-west4 (project acme)"),
    (400, "INVALID_ARGUMENT", "Location europe-west4 does not offer ct5lp-hightpu-4t",
     "vertex.region=europe-west4"),
    (400, "INVALID_ARGUMENT", "tpu_topology 4x4 is not valid for the machine type",
     "trainer.tpu_slice=v5e-16"),
    (403, "PERMISSION_DENIED", "Permission 'aiplatform.customJobs.create' denied",
     "vertex.service_account=trainer@acme.iam.gserviceaccount.com in vertex.project=acme"),
])
def test_an_api_error_is_one_line_naming_the_setting(tmp_path, status, name, message, names):
    with VertexStandIn() as standin:
        standin.fail(status, name, message)
        with pytest.raises(vertex_job.VertexError) as error:
            _run(tmp_path, standin)
    text = str(error.value)
    assert text.startswith(f"Vertex AI refused the Trainer's job ({names}): ") and "\n" not in text
    assert message in text


def test_settings_missing_from_config_and_run_are_named(tmp_path):
    with pytest.raises(vertex_job.VertexError, match=r"^vertex.region is not set: the "
                                                          r"Trainer of a multi-host TPU slice "
                                                          r"runs as a Vertex AI job \(set "
                                                          r"\[vertex\] region in the config, or "
                                                          r"run with --param vertex_region=\.\.\.\)$"):
        _run(tmp_path, VertexStandIn(), vertex_region="")


def _trainer_config(**trainer) -> str:
    """A Trainer custom_config as the pipeline writes it (TrainSpec), with these settings."""
    from trainer_module.settings import TrainerConfig
    from trainer_module.custom_config import TrainSpec

    return json.dumps(TrainSpec("species", "classification",
                                TrainerConfig(strategy="tpu", **trainer)).to_custom_config())


def _submitted_trainer(body: dict) -> tuple[str, dict, dict]:
    """The slice a created job runs on, its Trainer's settings and exec properties."""
    job = CustomJob.from_json(json.dumps(body))
    [pool] = job.job_spec.worker_pool_specs
    args = list(pool.container_spec.args)
    properties = json.loads(base64.b64decode(args[args.index("--exec-properties-base64") + 1]))
    custom = json.loads(properties["custom_config"])
    return pool.machine_spec.tpu_topology, custom["trainer"], properties


@pytest.mark.parametrize("refusal", ["create", "job"])
def test_no_capacity_for_the_slice_falls_back_to_the_next_with_the_accumulation_that_keeps_the_global_batch(
        tmp_path, caplog, refusal):
    """trainer.fallback_slices = ["v5e-8"]: Vertex answers the v5e-16 job with no capacity (the
    create refused, or the job failed for want of TPU VMs); the task submits it on the v5e-8
    with accumulation 2 (16 replicas x 1 = 8 x 2), the run parameter too, and says so."""
    from trainer_module import scaling
    from trainer_module.settings import TrainerConfig

    no_capacity = [{"state": "JOB_STATE_FAILED", "error": {
        "code": 8, "message": "Resources are insufficient in region: europe-west4"}}]
    custom = _trainer_config(tpu_slice="v5e-16", fallback_slices=["v5e-8", "v5e-4"])
    with VertexStandIn() as standin, caplog.at_level("WARNING"):
        if refusal == "create":
            standin.fail(429, "RESOURCE_EXHAUSTED", "The zone does not have enough resources "
                                                    "available to fulfill the request")
        else:
            standin.scripts = [no_capacity]
        _run(tmp_path, standin, custom_config=custom, accumulation_steps=1)
    first_body, body = standin.creates()  # v5e-16 (refused, or failed), then v5e-8
    assert _submitted_trainer(first_body)[0] == slices.get("v5e-16").topology
    assert body["displayName"].startswith("lockstep-trainer-v5e-8-")
    topology, trainer_cfg, properties = _submitted_trainer(body)
    assert topology == slices.get("v5e-8").topology
    assert (trainer_cfg["tpu_slice"], trainer_cfg["accumulation_steps"]) == ("v5e-8", 2)
    assert properties["accumulation_steps"] == 2  # the run parameter, which would override it
    # The plan on 8 replicas x 2 has the global batch, rate and steps of 16 replicas.
    first = scaling.make_plan(TrainerConfig(train_steps=100), 16, on_tpu=True)
    then = scaling.make_plan(TrainerConfig(train_steps=100, accumulation_steps=2), 8, on_tpu=True)
    assert (then.global_batch, then.learning_rate) == (first.global_batch, first.learning_rate)
    said = [r.getMessage() for r in caplog.records if "No capacity" in r.getMessage()]
    print("\n".join(said))
    assert len(said) == 1 and said[0].startswith("No capacity for v5e-16 (")
    assert said[0].endswith("submitting the Trainer's job on v5e-8 (8 replicas) with "
                            "accumulation 2, which keeps the global batch of v5e-16 (16 replicas "
                            "x 1); trainer.fallback_slices")
    record = json.loads((tmp_path / "model_run" / vertex_job.JOB_RECORD).read_text())
    assert record["tpu_slice"] == "v5e-8"


def test_a_preempted_slice_with_no_capacity_left_goes_on_on_the_fallback_as_the_same_job(
        tmp_path):
    """The v5e-16 job is preempted mid-training (its hosts saved at one step: SIGTERM to one
    machine, tests/test_gpu_machines.py); the task submits it again, Vertex has no capacity for
    a v5e-16 any more, and the task submits it on the v5e-8 with accumulation 2. That job is the
    same job (resume.job_key: the slice and the accumulation are where it runs), so its Trainer
    resumes from what the preempted one saved and parked."""
    from trainer_module import resume
    from trainer_module.job import TrainJob
    from trainer_module.custom_config import TrainSpec

    preempted = [{"state": "JOB_STATE_RUNNING"},
                 {"state": "JOB_STATE_FAILED",
                  "error": {"code": 14, "message": "The TPU VMs were preempted"}}]
    custom = _trainer_config(tpu_slice="v5e-16", fallback_slices=["v5e-8"])
    with VertexStandIn() as standin:
        standin.scripts = [preempted]
        original_create = standin._create

        def create(parent, body):  # the resubmission of the v5e-16 finds no capacity
            if len(standin.creates()) == 2:
                standin.fail(429, "RESOURCE_EXHAUSTED", "The zone does not have enough "
                                                        "resources available")
            return original_create(parent, body)

        standin._create = create
        _run(tmp_path, standin, custom_config=custom, accumulation_steps=1)
    bodies = standin.creates()
    slices_run = [_submitted_trainer(body)[1]["tpu_slice"] for body in bodies]
    assert slices_run == ["v5e-16", "v5e-16", "v5e-8"], slices_run

    def key(body) -> str:
        _, _, properties = _submitted_trainer(body)
        spec = TrainSpec.from_custom_config(json.loads(properties["custom_config"]), properties)
        return resume.job_key(TrainJob(["/examples/Split-train/*"], [], "/transform", "/run",
                                       "/model", spec=spec))

    assert _submitted_trainer(bodies[-1])[1]["accumulation_steps"] == 2
    assert key(bodies[-1]) == key(bodies[0])


def test_without_fallback_slices_no_capacity_is_the_error_it_was(tmp_path):
    with VertexStandIn() as standin:
        standin.fail(429, "RESOURCE_EXHAUSTED", "Quota exceeded for TPU v5 lite pod cores")
        with pytest.raises(vertex_job.VertexError, match="quota for v5e-16 TPU VMs"):
            _run(tmp_path, standin, custom_config=_trainer_config(tpu_slice="v5e-16"))


@pytest.mark.parametrize("fallbacks, message", [
    (["v5e-32"], r"v5e-32 \(32 replicas\) cannot keep the global batch of v5e-16 \(16 replicas "
                 r"x 1\): its replicas must divide 16"),
    (["v5e-3"], "unknown TPU slice 'v5e-3'"),
    ([8], 'a slice is a name such as "v5e-8", got 8')])
def test_a_fallback_slice_that_cannot_keep_the_global_batch_is_refused_in_the_config(
        fallbacks, message):
    from trainer_module.settings import TrainerConfig, TrainerConfigError

    with pytest.raises(TrainerConfigError, match=rf"^trainer.fallback_slices: {message}"):
        TrainerConfig(tpu_slice="v5e-16", fallback_slices=fallbacks).validate()
    TrainerConfig(tpu_slice="v5e-16", accumulation_steps=2, fallback_slices=["v5e-8", "v5e-4",
                                                                             "v5e-1"]).validate()
