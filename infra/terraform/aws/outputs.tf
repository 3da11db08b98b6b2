# ----------------------------------------------------------------------------- what harnessrl and ../platform need

locals {
  # Names harnessrl's configs expect (conf/infra/gpu_cluster.yaml); ../platform creates the PVC and the secret.
  # checkov:skip=CKV_SECRET_6: not a secret: the Kubernetes secret's name and the names of the environment variables it fills.
  harnessrl_secret = { secret = "harnessrl-s3", env = { access_key = "AWS_ACCESS_KEY_ID", secret_key = "AWS_SECRET_ACCESS_KEY" } }
  harnessrl_pvc    = { name = "harnessrl-models", mount_path = "/models" }
  gpu_toleration   = { key = local.gpu_taint.key, operator = "Exists", effect = "NoSchedule" }

  harnessrl_config = {
    infra = {
      pipeline_root = "s3://${module.artifacts.name}/pipelines"
      pvc           = local.harnessrl_pvc
      secrets       = [local.harnessrl_secret]
      resources = {
        for stage, pool in var.stage_pools : stage => merge(
          { node_selector = { (local.pool_label_key) = pool } },
          startswith(pool, "gpu-") ? { tolerations = [local.gpu_toleration] } : {},
        )
      }
    }
    store = {
      uri         = "s3://${module.artifacts.name}/checkpoints"
      data_remote = "s3://${module.artifacts.name}/dvc"
      region      = var.region
    }
  }

  platform_inputs = {
    cluster_name              = aws_eks_cluster.this.name
    region                    = var.region
    cluster_endpoint          = aws_eks_cluster.this.endpoint
    cluster_ca_certificate    = aws_eks_cluster.this.certificate_authority[0].data
    pipeline_role_arn         = aws_iam_role.pipeline.arn
    pipeline_service_accounts = var.pipeline_service_accounts
    bucket_name               = module.artifacts.name
    efs_file_system_id        = one(aws_efs_file_system.models[*].id)
    pvc_name                  = local.harnessrl_pvc.name
    s3_secret_name            = local.harnessrl_secret.secret
    enable_efa_device_plugin  = var.enable_efa
    gpu_taint_key             = local.gpu_taint.key
    gpu_pools                 = sort([for pool in keys(local.node_pools) : pool if pool != "cpu"])
  }
}

output "cluster_name" {
  description = "EKS cluster name."
  value       = aws_eks_cluster.this.name
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint."
  value       = aws_eks_cluster.this.endpoint
}

output "cluster_certificate_authority_data" {
  description = "Base64 cluster CA certificate."
  value       = aws_eks_cluster.this.certificate_authority[0].data
}

output "kubeconfig_command" {
  description = "Writes a kubeconfig entry for this cluster."
  value       = "aws eks update-kubeconfig --region ${var.region} --name ${aws_eks_cluster.this.name}"
}

output "oidc_provider_arn" {
  description = "IRSA OIDC provider ARN."
  value       = aws_iam_openid_connect_provider.eks.arn
}

output "vpc_id" {
  description = "VPC id."
  value       = module.vpc.vpc_id
}

output "private_subnet_ids" {
  description = "Private subnet ids by zone."
  value       = module.vpc.private_subnet_ids
}

output "bucket_name" {
  description = "Artifact bucket (pipelines/, checkpoints/, dvc/)."
  value       = module.artifacts.name
}

output "bucket_arn" {
  description = "Artifact bucket ARN."
  value       = module.artifacts.arn
}

output "pipeline_role_arn" {
  description = "IRSA role for the pipeline service accounts; annotate them with eks.amazonaws.com/role-arn=<this>."
  value       = aws_iam_role.pipeline.arn
}

output "pipeline_policy_json" {
  description = "The pipeline role's only permissions policy."
  value       = aws_iam_role_policy.pipeline_bucket.policy
}

output "efs_file_system_id" {
  description = "EFS file system behind the harnessrl-models PVC, or null when enable_efs is false."
  value       = one(aws_efs_file_system.models[*].id)
}

output "node_pools" {
  description = "harnessrl.io/pool value -> node group keys providing it."
  value       = local.node_pools
}

output "gpu_node_groups" {
  description = "GPU node groups: EKS name, labels, taints, placement group, EFA interfaces, AMI type."
  value = { for k, m in module.gpu_node_group : k => {
    name            = m.node_group_name
    labels          = m.labels
    taints          = m.taints
    placement_group = m.placement_group
    efa_interfaces  = m.efa_interfaces
    ami_type        = m.ami_type
  } }
}

output "harnessrl_config" {
  description = "YAML for harnessrl: the infra and store keys this cluster determines. With the defaults it agrees with conf/infra/gpu_cluster.yaml and conf/store/s3.yaml."
  value       = "# Rendered by infra/terraform/aws for cluster ${var.cluster_name}.\n${yamlencode(local.harnessrl_config)}"
}

output "harnessrl_overrides" {
  description = "The same as Hydra command-line overrides, for harnessrl compile/submit."
  value = join(" ", [
    "infra=gpu_cluster",
    "store=s3",
    "infra.pipeline_root=${local.harnessrl_config.infra.pipeline_root}",
    "store.uri=${local.harnessrl_config.store.uri}",
    "store.data_remote=${local.harnessrl_config.store.data_remote}",
    "store.region=${var.region}",
  ])
}

output "platform_tfvars" {
  description = "Inputs for ../platform: terraform output -raw platform_tfvars > ../platform/cluster.auto.tfvars"
  value       = join("", [for k, v in local.platform_inputs : "${k} = ${jsonencode(v)}\n"])
}
