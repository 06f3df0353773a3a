output "cluster_name" {
  description = "The GKE cluster (for `gcloud container clusters get-credentials`)."
  value       = google_container_cluster.cluster.name
}

output "cluster_location" {
  description = "The cluster's region."
  value       = google_container_cluster.cluster.location
}

output "bucket" {
  description = "The bucket for data and the pipeline root, in the TPUs' region."
  value       = google_storage_bucket.pipeline.name
}

output "data_root" {
  description = "Where data spans go: gs://BUCKET/data/span-N/*.csv (lockstep config data.path)."
  value       = "gs://${google_storage_bucket.pipeline.name}/data"
}

output "pipeline_root" {
  description = "lockstep config paths.pipeline_root, and KFP's default pipeline root."
  value       = "gs://${google_storage_bucket.pipeline.name}/pipeline-root"
}

output "serving_dir" {
  description = "lockstep config paths.serving_dir: where blessed models are pushed (its own bucket; the pipeline can add, not overwrite)."
  value       = "gs://${google_storage_bucket.serving.name}/models"
}

output "models_service_account" {
  description = "The operators' account for the serving bucket: roll back or remove model versions."
  value       = google_service_account.models.email
}

output "image_repository" {
  description = "Push the pipeline image here (lockstep config kubeflow.image)."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}/lockstep-pipeline"
}

output "pipeline_service_account" {
  description = "The Google service account pipeline pods act as (infra/kubernetes/lockstep/settings.env)."
  value       = google_service_account.pipeline.email
}

output "tpu_slice" {
  description = "The TPU node pool's slice: chips, and whether it spans several hosts."
  value       = { machine_type = var.tpu_machine_type, topology = var.tpu_topology, chips = local.tpu_chips, multi_host = local.tpu_multi_host }
}
