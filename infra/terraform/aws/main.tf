# harnessrl GPU cluster on AWS: VPC, EKS, a CPU pool, H100 pools, the artifact bucket and IRSA.
# Read top to bottom: catalog -> network -> cluster -> node pools -> storage -> access -> outputs.tf.

data "aws_partition" "current" {}

data "aws_caller_identity" "current" {}

locals {
  partition  = data.aws_partition.current.partition
  account_id = data.aws_caller_identity.current.account_id
  # The account as a key policy principal: lets IAM policies in this account grant use of a KMS key.
  account_root_arn = "arn:${local.partition}:iam::${local.account_id}:root"

  # What harnessrl schedules on (conf/infra/gpu_cluster.yaml): node_selector harnessrl.io/pool and the
  # toleration nvidia.com/gpu:NoSchedule. Change these only together with that file.
  pool_label_key = "harnessrl.io/pool"
  gpu_taint      = { key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }

  # Instance facts the node groups need (memory in GiB). pool is the harnessrl.io/pool label value.
  gpu_instances = {
    "p5.48xlarge"   = { pool = "gpu-h100", gpus = 8, cpu = 192, memory_gib = 2048, efa_interfaces = 32 }
    "p5e.48xlarge"  = { pool = "gpu-h200", gpus = 8, cpu = 192, memory_gib = 2048, efa_interfaces = 32 }
    "p5en.48xlarge" = { pool = "gpu-h200", gpus = 8, cpu = 192, memory_gib = 2048, efa_interfaces = 16 }
    "p4d.24xlarge"  = { pool = "gpu-a100", gpus = 8, cpu = 96, memory_gib = 1152, efa_interfaces = 4 }
    "p4de.24xlarge" = { pool = "gpu-a100", gpus = 8, cpu = 96, memory_gib = 1152, efa_interfaces = 4 }
  }
  cpu_instances = {
    "m7i.4xlarge"  = { cpu = 16, memory_gib = 64 }
    "m7i.8xlarge"  = { cpu = 32, memory_gib = 128 }
    "m7i.16xlarge" = { cpu = 64, memory_gib = 256 }
    "m6i.8xlarge"  = { cpu = 32, memory_gib = 128 }
    "r7i.8xlarge"  = { cpu = 32, memory_gib = 256 }
  }

  gpu_az = coalesce(var.gpu_availability_zone, var.availability_zones[0])

  # pool -> node groups providing it
  node_pools = merge(
    { "cpu" = ["cpu"] },
    { for pool in distinct([for g in var.gpu_node_groups : local.gpu_instances[g.instance_type].pool]) :
      pool => sort([for name, g in var.gpu_node_groups : name if local.gpu_instances[g.instance_type].pool == pool])
    },
  )

  # Does every node group fit the largest harnessrl pod of its pool? (memory: request in G, capacity in GiB)
  cpu_request = lookup(var.harnessrl_pool_requests, "cpu", null)
  cpu_fits = local.cpu_request == null ? true : alltrue([
    for t in var.cpu_node_group.instance_types :
    local.cpu_instances[t].cpu > local.cpu_request.cpu && local.cpu_instances[t].memory_gib * 1.073741824 > local.cpu_request.memory_gb
  ])
}
