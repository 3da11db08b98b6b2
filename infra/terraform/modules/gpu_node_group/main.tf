# One EKS managed node group of GPU instances: NVIDIA AL2023 AMI, the harnessrl pool label, the GPU taint,
# optionally every EFA interface and a cluster placement group, all in one subnet (one zone).

variable "name" {
  description = "Node group, launch template and placement group name."
  type        = string
}

variable "cluster_name" {
  description = "EKS cluster name."
  type        = string
}

variable "kubernetes_version" {
  description = "Kubernetes version of the nodes (the cluster's)."
  type        = string
}

variable "node_role_arn" {
  description = "Node IAM role."
  type        = string
}

variable "subnet_id" {
  description = "The one private subnet GPU nodes run in."
  type        = string
}

variable "instance_type" {
  description = "GPU instance type, e.g. p5.48xlarge."
  type        = string
}

variable "min_size" {
  description = "Minimum nodes."
  type        = number
}

variable "desired_size" {
  description = "Nodes at creation."
  type        = number
}

variable "max_size" {
  description = "Maximum nodes."
  type        = number
}

variable "capacity_type" {
  description = "ON_DEMAND, SPOT or CAPACITY_BLOCK."
  type        = string
}

variable "capacity_reservation_id" {
  description = "Capacity reservation or capacity block id, or null."
  type        = string
  default     = null
}

variable "disk_size_gib" {
  description = "Root volume size (container images with CUDA are large)."
  type        = number
}

variable "labels" {
  description = "Kubernetes node labels."
  type        = map(string)
}

variable "taint" {
  description = "The one taint every node gets: {key, value, effect} with effect in EKS spelling (NO_SCHEDULE)."
  type        = object({ key = string, value = string, effect = string })
}

variable "efa_interfaces" {
  description = "EFA interfaces to attach (one per network card); 0: a plain ENA interface."
  type        = number
  default     = 0
}

variable "security_group_ids" {
  description = "Security groups for the node (the cluster security group first, then the EFA group)."
  type        = list(string)
}

variable "placement_group" {
  description = "Create a cluster placement group for this node group."
  type        = bool
  default     = false
}

variable "instance" {
  description = "Facts about instance_type: gpus, cpu, memory_gib."
  type        = object({ pool = string, gpus = number, cpu = number, memory_gib = number, efa_interfaces = number })
}

variable "pool_request" {
  description = "The largest harnessrl pod this pool must fit ({gpus, cpu, memory_gb}), or null when harnessrl does not schedule on it."
  type        = object({ gpus = number, cpu = number, memory_gb = number })
  default     = null
}

locals {
  # Fits the largest harnessrl pod of its pool (memory: request in G, capacity in GiB). A conditional, not ||:
  # Terraform evaluates both sides of ||.
  fits = var.pool_request == null ? true : (
    var.instance.gpus >= var.pool_request.gpus &&
    var.instance.cpu > var.pool_request.cpu &&
    var.instance.memory_gib * 1.073741824 > var.pool_request.memory_gb
  )
}

resource "aws_placement_group" "this" {
  count    = var.placement_group ? 1 : 0
  name     = var.name
  strategy = "cluster"
}

resource "aws_launch_template" "this" {
  name_prefix            = "${var.name}-"
  update_default_version = true

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.disk_size_gib
      volume_type           = "gp3"
      iops                  = 16000
      throughput            = 1000
      encrypted             = true
      delete_on_termination = true
    }
  }

  # IMDSv2 only, and one hop: pods cannot borrow the node role; they use IRSA.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  # With EFA the interfaces carry the security groups; without, the template does.
  vpc_security_group_ids = var.efa_interfaces > 0 ? null : var.security_group_ids

  dynamic "network_interfaces" {
    for_each = range(var.efa_interfaces)
    content {
      network_card_index    = network_interfaces.value
      device_index          = network_interfaces.value == 0 ? 0 : 1
      interface_type        = "efa"
      delete_on_termination = true
      security_groups       = var.security_group_ids
    }
  }

  dynamic "placement" {
    for_each = aws_placement_group.this
    content {
      group_name = placement.value.name
    }
  }

  dynamic "capacity_reservation_specification" {
    for_each = var.capacity_reservation_id == null ? [] : [var.capacity_reservation_id]
    content {
      capacity_reservation_target {
        capacity_reservation_id = capacity_reservation_specification.value
      }
    }
  }

  dynamic "instance_market_options" {
    for_each = var.capacity_type == "CAPACITY_BLOCK" ? [1] : []
    content {
      market_type = "capacity-block"
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = var.name }
  }
}

resource "aws_eks_node_group" "this" {
  cluster_name    = var.cluster_name
  node_group_name = var.name
  version         = var.kubernetes_version
  node_role_arn   = var.node_role_arn
  subnet_ids      = [var.subnet_id]
  ami_type        = "AL2023_x86_64_NVIDIA"
  instance_types  = [var.instance_type]
  capacity_type   = var.capacity_type
  labels          = var.labels

  taint {
    key    = var.taint.key
    value  = var.taint.value
    effect = var.taint.effect
  }

  launch_template {
    id      = aws_launch_template.this.id
    version = aws_launch_template.this.latest_version
  }

  scaling_config {
    min_size     = var.min_size
    desired_size = var.desired_size
    max_size     = var.max_size
  }

  update_config {
    max_unavailable = 1
  }

  lifecycle {
    ignore_changes = [scaling_config[0].desired_size]
    precondition {
      condition     = local.fits
      error_message = "${var.instance_type} (${var.instance.gpus} GPUs, ${var.instance.cpu} vCPU, ${var.instance.memory_gib} GiB) cannot fit harnessrl's largest pod on pool ${var.labels["harnessrl.io/pool"]}: ${jsonencode(var.pool_request)}."
    }
  }
}

output "node_group_name" {
  description = "EKS node group name."
  value       = aws_eks_node_group.this.node_group_name
}

output "labels" {
  description = "Node labels."
  value       = aws_eks_node_group.this.labels
}

output "taints" {
  description = "Node taints."
  value       = aws_eks_node_group.this.taint
}

output "placement_group" {
  description = "Placement group name, or null."
  value       = one(aws_placement_group.this[*].name)
}

output "efa_interfaces" {
  description = "EFA interfaces in the launch template."
  value       = length([for ni in aws_launch_template.this.network_interfaces : ni if ni.interface_type == "efa"])
}

output "ami_type" {
  description = "The node group's AMI type."
  value       = aws_eks_node_group.this.ami_type
}
