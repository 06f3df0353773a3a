# Two regional buckets, in the TPUs' region: one for the data (spans) and the pipeline root
# (artifacts, checkpoints), one for the serving models. The pipeline may add a model version to
# the serving bucket but never overwrite or delete one (infra/terraform/iam.tf): a task that
# goes wrong cannot touch what production serves.

resource "google_storage_bucket" "pipeline" {
  name                        = "${var.project_id}-${var.name}"
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection
  labels                      = var.labels

  versioning {
    enabled = true
  }

  # Old versions of overwritten objects (rewritten artifacts) go after 30 days.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  # checkov:skip=CKV_GCP_62:Access logs go to Cloud Audit Logs (Data Access logs); a second log bucket is not needed.
}

resource "google_storage_bucket" "serving" {
  name                        = "${var.project_id}-${var.name}-serving"
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection
  labels                      = var.labels

  # A model version removed by mistake can be restored.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 90
    }
    action {
      type = "Delete"
    }
  }

  # checkov:skip=CKV_GCP_62:Access logs go to Cloud Audit Logs (Data Access logs); a second log bucket is not needed.
}

resource "google_artifact_registry_repository" "images" {
  # checkov:skip=CKV_GCP_84:Images hold no data or secrets; Google-managed encryption. Set kms_key_name here if policy asks for CMEK.
  repository_id = var.name
  location      = var.region
  format        = "DOCKER"
  description   = "The lockstep pipeline image (infra/Dockerfile)."
  labels        = var.labels
}
