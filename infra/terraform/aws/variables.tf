# ----------------------------------------------------------------------------- naming and placement

variable "cluster_name" {
  description = "EKS cluster name; also prefixes every resource name."
  type        = string
  default     = "harnessrl"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.cluster_name))
    error_message = "cluster_name must be 3-32 characters of lowercase letters, digits and '-', starting with a letter."
  }
}

variable "region" {
  description = "AWS region. H100 capacity (p5) exists only in some regions and zones."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "availability_zones" {
  description = "Zones for the private (and NAT) subnets, at least two (EKS needs two). Given explicitly: GPU capacity is per zone."
  type        = list(string)
  default     = ["us-east-1a", "us-east-1b", "us-east-1c"]

  validation {
    condition     = length(var.availability_zones) >= 2 && length(var.availability_zones) <= 3 && length(distinct(var.availability_zones)) == length(var.availability_zones)
    error_message = "availability_zones needs two or three distinct zones."
  }
  validation {
    condition     = alltrue([for az in var.availability_zones : startswith(az, var.region)])
    error_message = "every availability zone must be in var.region."
  }
}

variable "gpu_availability_zone" {
  description = "The one zone GPU nodes run in (EFA and a cluster placement group need a single zone). null: the first of availability_zones."
  type        = string
  default     = null

  validation {
    condition     = var.gpu_availability_zone == null || contains(var.availability_zones, coalesce(var.gpu_availability_zone, "-"))
    error_message = "gpu_availability_zone must be one of availability_zones."
  }
}

variable "vpc_cidr" {
  description = "VPC CIDR; split into one /18 private and one /24 public subnet per zone."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.vpc_cidr)) && tonumber(split("/", var.vpc_cidr)[1]) <= 16
    error_message = "vpc_cidr must be a valid IPv4 CIDR of /16 or larger (pods take VPC IPs with the VPC CNI)."
  }
}

variable "flow_log_retention_days" {
  description = "Days CloudWatch keeps the VPC flow logs (all traffic). Must be a retention CloudWatch Logs offers."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.flow_log_retention_days)
    error_message = "flow_log_retention_days must be one of 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653."
  }
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

# ----------------------------------------------------------------------------- EKS

variable "kubernetes_version" {
  description = "EKS Kubernetes version."
  type        = string
  default     = "1.32"

  validation {
    condition     = can(regex("^1\\.(2[89]|3[0-9])$", var.kubernetes_version))
    error_message = "kubernetes_version must be 1.28 or newer, e.g. 1.32."
  }
}

variable "endpoint_public_access_cidrs" {
  description = "CIDRs allowed to reach the public API endpoint. Empty: the endpoint is private only (reach it over VPN/peering)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.endpoint_public_access_cidrs : can(cidrnetmask(c))])
    error_message = "endpoint_public_access_cidrs must be IPv4 CIDRs."
  }
}

variable "cpu_node_group" {
  description = "The CPU pool (label harnessrl.io/pool=cpu): KFP, KubeRay and the CPU stages (base, default)."
  type = object({
    instance_types = optional(list(string), ["m7i.8xlarge"])
    min_size       = optional(number, 1)
    desired_size   = optional(number, 2)
    max_size       = optional(number, 6)
    disk_size_gib  = optional(number, 200)
  })
  default = {}

  validation {
    condition     = length(var.cpu_node_group.instance_types) > 0 && alltrue([for t in var.cpu_node_group.instance_types : contains(keys(local.cpu_instances), t)])
    error_message = "cpu_node_group.instance_types must come from: m7i.4xlarge, m7i.8xlarge, m7i.16xlarge, m6i.8xlarge, r7i.8xlarge."
  }
  validation {
    condition     = var.cpu_node_group.min_size >= 0 && var.cpu_node_group.min_size <= var.cpu_node_group.desired_size && var.cpu_node_group.desired_size <= var.cpu_node_group.max_size && var.cpu_node_group.max_size > 0
    error_message = "cpu_node_group needs 0 <= min_size <= desired_size <= max_size and max_size > 0."
  }
}

variable "gpu_node_groups" {
  description = <<-EOT
    GPU node groups by name. Each gets AMI AL2023_x86_64_NVIDIA, the label harnessrl.io/pool=<pool of its
    instance type> (p5.48xlarge: gpu-h100) and the taint nvidia.com/gpu=true:NoSchedule.
    capacity_reservation_id targets an On-Demand Capacity Reservation or a Capacity Block (capacity_type CAPACITY_BLOCK).
  EOT
  type = map(object({
    instance_type           = optional(string, "p5.48xlarge")
    min_size                = optional(number, 0)
    desired_size            = optional(number, 1)
    max_size                = optional(number, 2)
    capacity_type           = optional(string, "ON_DEMAND")
    capacity_reservation_id = optional(string)
    disk_size_gib           = optional(number, 1000)
  }))
  default = { h100 = {} }

  validation {
    condition     = alltrue([for name, _ in var.gpu_node_groups : can(regex("^[a-z][a-z0-9-]{0,19}$", name))])
    error_message = "gpu_node_groups keys must be 1-20 characters of lowercase letters, digits and '-', starting with a letter."
  }
  validation {
    condition     = alltrue([for g in var.gpu_node_groups : contains(keys(local.gpu_instances), g.instance_type)])
    error_message = "gpu_node_groups instance_type must come from: p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge, p4de.24xlarge."
  }
  validation {
    condition     = alltrue([for g in var.gpu_node_groups : g.max_size > 0 && g.min_size >= 0 && g.min_size <= g.desired_size && g.desired_size <= g.max_size])
    error_message = "each GPU node group needs 0 <= min_size <= desired_size <= max_size and max_size > 0 (at least one GPU node)."
  }
  validation {
    condition     = alltrue([for g in var.gpu_node_groups : contains(["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"], g.capacity_type)])
    error_message = "capacity_type must be ON_DEMAND, SPOT or CAPACITY_BLOCK."
  }
  validation {
    condition     = alltrue([for g in var.gpu_node_groups : g.capacity_type != "CAPACITY_BLOCK" || g.capacity_reservation_id != null])
    error_message = "capacity_type CAPACITY_BLOCK needs capacity_reservation_id."
  }
}

variable "harnessrl_pool_requests" {
  description = <<-EOT
    The largest pod each harnessrl node pool must fit, from conf/infra/gpu_cluster.yaml (cpt/sft/rl: 8 GPUs, 96 CPU,
    1600G; base: 8 CPU, 64G). Every pool named here must be provided by a node group, and every node group of that
    pool must fit the request; apply fails early otherwise.
  EOT
  type = map(object({
    gpus      = number
    cpu       = number
    memory_gb = number
  }))
  default = {
    "cpu"      = { gpus = 0, cpu = 8, memory_gb = 64 }
    "gpu-h100" = { gpus = 8, cpu = 96, memory_gb = 1600 }
  }
}

# ----------------------------------------------------------------------------- optional parts

variable "enable_efa" {
  description = "Attach every EFA interface the GPU instance has (p5: 32) and an EFA security group."
  type        = bool
  default     = true
}

variable "enable_placement_group" {
  description = "Put GPU nodes in a cluster placement group (one per GPU node group)."
  type        = bool
  default     = true
}

variable "enable_efs" {
  description = "EFS file system + EFS CSI driver for the ReadWriteMany PVC harnessrl-models (model weights at /models)."
  type        = bool
  default     = true
}

variable "enable_s3_endpoint" {
  description = "S3 gateway endpoint, so checkpoint traffic skips the NAT gateway (and its per-GB charge)."
  type        = bool
  default     = true
}

variable "enable_secrets_encryption" {
  description = "Envelope-encrypt Kubernetes secrets with a dedicated KMS key."
  type        = bool
  default     = true
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all zones (cheaper) instead of one per zone (zone-failure tolerant)."
  type        = bool
  default     = true
}

# ----------------------------------------------------------------------------- storage and access

variable "bucket_name" {
  description = "S3 bucket for pipeline artifacts (pipelines/), checkpoints (checkpoints/) and the DVC remote (dvc/). conf/ expects harnessrl-artifacts; bucket names are global, so override it and the configs together (see the harnessrl_overrides output)."
  type        = string
  default     = "harnessrl-artifacts"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !can(regex("\\.\\.|^xn--|-s3alias$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'."
  }
}

variable "bucket_force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket (checkpoints!). Keep false outside test accounts."
  type        = bool
  default     = false
}

variable "noncurrent_version_expiration_days" {
  description = "Delete overwritten/deleted object versions after this many days."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1
    error_message = "noncurrent_version_expiration_days must be at least 1."
  }
}

variable "pipeline_service_accounts" {
  description = "Kubernetes service accounts (namespace:name) allowed to assume the pipeline IAM role (IRSA). KFP standalone runs pipelines as kubeflow:pipeline-runner."
  type        = list(string)
  default     = ["kubeflow:pipeline-runner"]

  validation {
    condition     = length(var.pipeline_service_accounts) > 0 && alltrue([for sa in var.pipeline_service_accounts : can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", sa))])
    error_message = "pipeline_service_accounts must be non-empty 'namespace:name' entries (no wildcards)."
  }
}

variable "admin_principal_arns" {
  description = "IAM principals (roles/users) given cluster-admin through EKS access entries, besides the creator."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.admin_principal_arns : can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/.+$", a))])
    error_message = "admin_principal_arns must be IAM role or user ARNs."
  }
}

variable "stage_pools" {
  description = "The node pool each harnessrl stage runs on (conf/infra/gpu_cluster.yaml resources.<stage>.node_selector); used for the rendered config."
  type        = map(string)
  default = {
    default      = "cpu"
    base         = "cpu"
    cpt          = "gpu-h100"
    sft          = "gpu-h100"
    rl           = "gpu-h100"
    long_horizon = "gpu-h100"
    eval         = "gpu-h100"
    live         = "gpu-h100"
  }

  validation {
    condition     = alltrue([for s, _ in var.stage_pools : contains(["default", "base", "cpt", "sft", "rl", "long_horizon", "eval", "live"], s)])
    error_message = "stage_pools keys must be harnessrl stages: default, base, cpt, sft, rl, long_horizon, eval, live."
  }
}
