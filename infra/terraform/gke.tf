# A private, regional GKE cluster with Workload Identity, and two node pools in one zone:
# CPU nodes for Kubeflow Pipelines and the non-Trainer components, and a TPU slice pool that
# scales from zero when a Trainer task asks for `google.com/tpu`.

locals {
  tpu_dims          = [for d in split("x", var.tpu_topology) : tonumber(d)]
  tpu_chips         = length(local.tpu_dims) == 3 ? local.tpu_dims[0] * local.tpu_dims[1] * local.tpu_dims[2] : local.tpu_dims[0] * local.tpu_dims[1]
  tpu_chips_per_vm  = tonumber(regex("-(\\d+)t$", var.tpu_machine_type)[0])
  tpu_multi_host    = local.tpu_chips > local.tpu_chips_per_vm
  node_oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
}

resource "google_container_cluster" "cluster" {
  # checkov:skip=CKV_GCP_12:Dataplane V2 (ADVANCED_DATAPATH) enforces network policies; the network_policy block is Calico's and must stay unset with it.
  # checkov:skip=CKV_GCP_65:Google Groups for RBAC needs a Google Workspace domain; add authenticator_groups_config when the organization has one.
  name                     = var.name
  location                 = var.region
  node_locations           = [var.zone]
  network                  = google_compute_network.vpc.id
  subnetwork               = google_compute_subnetwork.nodes.id
  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = var.deletion_protection
  resource_labels          = var.labels

  release_channel {
    channel = "REGULAR"
  }

  workload_identity_config {
    workload_pool = "${var.project_id}.svc.id.goog"
  }

  ip_allocation_policy {
    cluster_secondary_range_name  = "pods"
    services_secondary_range_name = "services"
  }

  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = var.master_cidr
  }

  master_authorized_networks_config {
    dynamic "cidr_blocks" {
      for_each = var.authorized_networks
      content {
        cidr_block   = cidr_blocks.value.cidr_block
        display_name = cidr_blocks.value.display_name
      }
    }
  }

  # Dataplane V2: network policies are enforced.
  datapath_provider           = "ADVANCED_DATAPATH"
  enable_shielded_nodes       = true
  enable_intranode_visibility = true

  binary_authorization {
    evaluation_mode = "PROJECT_SINGLETON_POLICY_ENFORCE"
  }

  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }

  logging_config {
    enable_components = ["SYSTEM_COMPONENTS", "WORKLOADS"]
  }

  monitoring_config {
    enable_components = ["SYSTEM_COMPONENTS"]
  }

  # The default pool is removed at once; these settings only apply to its short life.
  node_config {
    service_account = google_service_account.nodes.email
    oauth_scopes    = local.node_oauth_scopes
    image_type      = "COS_CONTAINERD"
    metadata = {
      disable-legacy-endpoints = "true"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }

  lifecycle {
    ignore_changes = [node_config]
  }
}

resource "google_container_node_pool" "cpu" {
  name           = "${var.name}-cpu"
  cluster        = google_container_cluster.cluster.id
  location       = var.region
  node_locations = [var.zone]

  autoscaling {
    min_node_count = var.cpu_min_nodes
    max_node_count = var.cpu_max_nodes
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = var.cpu_machine_type
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    oauth_scopes    = local.node_oauth_scopes
    labels          = merge(var.labels, { pool = "cpu" })
    metadata = {
      disable-legacy-endpoints = "true"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}

# GKE labels these nodes with cloud.google.com/gke-tpu-accelerator and -topology and taints them
# google.com/tpu; `lockstep compile` gives the Trainer task the matching selectors and toleration.
resource "google_container_node_pool" "tpu" {
  name           = "${var.name}-tpu-${replace(var.tpu_topology, "x", "-")}"
  cluster        = google_container_cluster.cluster.id
  location       = var.region
  node_locations = [var.zone]

  autoscaling {
    min_node_count = 0
    max_node_count = var.tpu_max_nodes
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  # A multi-host slice is one atomic group of VMs in a compact placement.
  dynamic "placement_policy" {
    for_each = local.tpu_multi_host ? [1] : []
    content {
      type         = "COMPACT"
      tpu_topology = var.tpu_topology
    }
  }

  node_config {
    machine_type    = var.tpu_machine_type
    spot            = var.tpu_spot
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    oauth_scopes    = local.node_oauth_scopes
    labels          = merge(var.labels, { pool = "tpu" })
    metadata = {
      disable-legacy-endpoints = "true"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}
