variable "project_id" {
  description = "The Google Cloud project that holds the cluster, the bucket and the image repository."
  type        = string
}

variable "region" {
  description = "Region of the cluster, the bucket and the image repository. TPU practice: data and checkpoints live in the TPU's region."
  type        = string
  default     = "us-central1"
}

variable "zone" {
  description = "Zone of the node pools; it must offer the TPU machine type (TPU capacity is zonal)."
  type        = string
  default     = "us-central1-a"
}

variable "name" {
  description = "Prefix of every resource's name."
  type        = string
  default     = "lockstep"
}

variable "tpu_machine_type" {
  description = "Machine type of the TPU node pool: ct5lp-hightpu-4t is one TPU v5e 2x2 host (4 chips, `lockstep plan --slice v5e-4`)."
  type        = string
  default     = "ct5lp-hightpu-4t"
}

variable "tpu_topology" {
  description = "TPU slice topology (the cloud.google.com/gke-tpu-topology node label): 2x2 for v5e-4, 2x4 for v5e-8, 2x2x1 for v4-8."
  type        = string
  default     = "2x2"
}

variable "tpu_max_nodes" {
  description = "Most TPU nodes the pool scales up to; it scales down to zero when no Trainer runs."
  type        = number
  default     = 1
}

variable "tpu_spot" {
  description = "Use Spot TPU VMs (cheaper, preemptible; the Trainer checkpoints and resumes)."
  type        = bool
  default     = false
}

variable "cpu_machine_type" {
  description = "Machine type of the CPU node pool that runs KFP and the non-Trainer components."
  type        = string
  default     = "n2-standard-8"
}

variable "cpu_min_nodes" {
  description = "Fewest CPU nodes (KFP's own services need at least one)."
  type        = number
  default     = 1
}

variable "cpu_max_nodes" {
  description = "Most CPU nodes."
  type        = number
  default     = 4
}

variable "subnet_cidr" {
  description = "Primary range of the cluster's subnet (nodes)."
  type        = string
  default     = "10.10.0.0/20"
}

variable "pods_cidr" {
  description = "Secondary range for pods."
  type        = string
  default     = "10.20.0.0/14"
}

variable "services_cidr" {
  description = "Secondary range for services."
  type        = string
  default     = "10.24.0.0/20"
}

variable "master_cidr" {
  description = "The /28 of the private control plane."
  type        = string
  default     = "172.16.0.0/28"
}

variable "authorized_networks" {
  description = "CIDR blocks allowed to reach the cluster's API server (your office or VPN; kubectl and `lockstep submit` through a port-forward)."
  type = list(object({
    cidr_block   = string
    display_name = string
  }))
  default = []
}

variable "kfp_namespace" {
  description = "Namespace of Kubeflow Pipelines (infra/kubernetes installs it there)."
  type        = string
  default     = "kubeflow"
}

variable "runner_service_account" {
  description = "Kubernetes service account that pipeline pods run as (infra/kubernetes/lockstep creates it)."
  type        = string
  default     = "lockstep-runner"
}

variable "deletion_protection" {
  description = "Refuse `terraform destroy` of the cluster and bucket while true."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels on every resource that takes them."
  type        = map(string)
  default     = { app = "lockstep" }
}
