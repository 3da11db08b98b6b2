# enable_* flags off remove the parts they guard (harnessrl_config.tftest.hcl checks they are on by default).

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

run "flags_off_remove_optional_parts" {
  command = plan

  variables {
    enable_efa                = false
    enable_placement_group    = false
    enable_efs                = false
    enable_s3_endpoint        = false
    enable_secrets_encryption = false
  }

  assert {
    condition     = length(aws_efs_file_system.models) == 0 && length(aws_kms_key.efs) == 0 && length(aws_efs_mount_target.models) == 0 && length(aws_eks_addon.efs_csi) == 0 && length(aws_iam_role.efs_csi) == 0 && output.efs_file_system_id == null
    error_message = "enable_efs = false must remove EFS, its KMS key, its mount targets, the CSI add-on and its role"
  }
  assert {
    condition     = length(aws_security_group.efa) == 0 && length(aws_vpc_security_group_ingress_rule.efa_self) == 0
    error_message = "enable_efa = false must remove the EFA security group"
  }
  assert {
    condition     = output.gpu_node_groups["h100"].placement_group == null && output.gpu_node_groups["h100"].efa_interfaces == 0
    error_message = "enable_placement_group/enable_efa = false must remove the placement group and the EFA interfaces"
  }
  assert {
    condition     = length(module.vpc.s3_endpoint_ids) == 0
    error_message = "enable_s3_endpoint = false must remove the S3 endpoint"
  }
  assert {
    condition     = length(aws_kms_key.secrets) == 0 && length(aws_eks_cluster.this.encryption_config) == 0
    error_message = "enable_secrets_encryption = false must remove the KMS key"
  }
  # The GPU node group itself stays, labelled and tainted.
  assert {
    condition     = output.gpu_node_groups["h100"].labels["harnessrl.io/pool"] == "gpu-h100"
    error_message = "the GPU node group must not depend on the flags"
  }
}
