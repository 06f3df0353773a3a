# Three service accounts, each with only what it needs:
# - nodes: write logs and metrics, pull the image;
# - pipeline: what the pipeline's pods do, through Workload Identity: read and write the pipeline
#   bucket; in the serving bucket, read, and add new objects (a new model version, its push
#   record), never overwrite or delete one;
# - models: the operators' account for the serving bucket (roll back, remove old versions).

resource "google_service_account" "nodes" {
  account_id   = "${var.name}-nodes"
  display_name = "lockstep GKE nodes"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
  ])
  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_artifact_registry_repository_iam_member" "nodes_pull" {
  repository = google_artifact_registry_repository.images.name
  location   = google_artifact_registry_repository.images.location
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_service_account" "pipeline" {
  account_id   = "${var.name}-pipeline"
  display_name = "lockstep pipeline pods (Workload Identity)"
}

# Read the data, write artifacts and checkpoints: this bucket only.
resource "google_storage_bucket_iam_member" "pipeline_objects" {
  bucket = google_storage_bucket.pipeline.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.pipeline.email}"
}

# TensorFlow's GCS filesystem lists the bucket itself.
resource "google_storage_bucket_iam_member" "pipeline_bucket_read" {
  bucket = google_storage_bucket.pipeline.name
  role   = "roles/storage.legacyBucketReader"
  member = "serviceAccount:${google_service_account.pipeline.email}"
}

# The serving bucket: read (the baseline, warm start) and create. objectCreator cannot replace
# or delete an object, so no pipeline task can overwrite a model that is served.
resource "google_storage_bucket_iam_member" "pipeline_serving" {
  for_each = toset([
    "roles/storage.objectViewer",
    "roles/storage.objectCreator",
    "roles/storage.legacyBucketReader",
  ])
  bucket = google_storage_bucket.serving.name
  role   = each.value
  member = "serviceAccount:${google_service_account.pipeline.email}"
}

resource "google_service_account" "models" {
  account_id   = "${var.name}-models"
  display_name = "lockstep serving models (operators: roll back, remove old versions)"
}

resource "google_storage_bucket_iam_member" "models_admin" {
  bucket = google_storage_bucket.serving.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.models.email}"
}

# The Kubernetes service account of the pipeline pods acts as the pipeline service account.
resource "google_service_account_iam_member" "pipeline_workload_identity" {
  service_account_id = google_service_account.pipeline.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project_id}.svc.id.goog[${var.kfp_namespace}/${var.runner_service_account}]"
  depends_on         = [google_container_cluster.cluster]
}
