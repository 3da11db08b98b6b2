# The artifact bucket is private, versioned and encrypted, and the pipeline role reaches that bucket and nothing else.
# The KMS keys have explicit policies, and VPC flow logs go to an encrypted log group the flow log role alone writes.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

run "irsa_role_is_scoped_to_the_one_bucket" {
  command = plan

  variables {
    bucket_name = "acme-harnessrl"
  }

  # Every statement allows, names no wildcard action, and targets only the bucket or its objects.
  assert {
    condition = alltrue([
      for st in jsondecode(aws_iam_role_policy.pipeline_bucket.policy).Statement :
      st.Effect == "Allow" &&
      alltrue([for a in st.Action : startswith(a, "s3:") && !strcontains(a, "*")]) &&
      alltrue([for r in st.Resource : contains(["arn:aws:s3:::acme-harnessrl", "arn:aws:s3:::acme-harnessrl/*"], r)])
    ])
    error_message = "the pipeline policy reaches beyond s3://acme-harnessrl: ${aws_iam_role_policy.pipeline_bucket.policy}"
  }
  assert {
    condition     = length(jsondecode(aws_iam_role_policy.pipeline_bucket.policy).Statement) == 2
    error_message = "expected exactly the list and object statements"
  }
  # Only the KFP pipeline service account may assume it, through this cluster's OIDC issuer.
  assert {
    condition = jsondecode(aws_iam_role.pipeline.assume_role_policy).Statement[0].Condition.StringEquals == {
      "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE:aud" = "sts.amazonaws.com"
      "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE:sub" = ["system:serviceaccount:kubeflow:pipeline-runner"]
    }
    error_message = "the pipeline role trust is not limited to kubeflow:pipeline-runner: ${aws_iam_role.pipeline.assume_role_policy}"
  }
  assert {
    condition     = output.pipeline_policy_json == aws_iam_role_policy.pipeline_bucket.policy
    error_message = "the pipeline role must carry no other inline policy than the bucket one"
  }
}

# The bucket module on its own: its resources are visible to assertions there.
run "bucket_is_private_versioned_encrypted" {
  command = plan

  module {
    source = "../modules/artifact_bucket"
  }

  variables {
    name = "acme-harnessrl"
  }

  assert {
    condition = alltrue([
      aws_s3_bucket_public_access_block.this.block_public_acls,
      aws_s3_bucket_public_access_block.this.block_public_policy,
      aws_s3_bucket_public_access_block.this.ignore_public_acls,
      aws_s3_bucket_public_access_block.this.restrict_public_buckets,
    ])
    error_message = "public access must be blocked four ways"
  }
  assert {
    condition     = aws_s3_bucket_versioning.this.versioning_configuration[0].status == "Enabled"
    error_message = "versioning must be on (checkpoints and DVC data are overwritten by prefix)"
  }
  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
    error_message = "objects must be KMS-encrypted"
  }
  assert {
    condition     = jsondecode(aws_s3_bucket_policy.tls_only.policy).Statement[0].Condition.Bool["aws:SecureTransport"] == "false" && jsondecode(aws_s3_bucket_policy.tls_only.policy).Statement[0].Effect == "Deny"
    error_message = "the bucket policy must deny plain HTTP"
  }
  assert {
    condition     = aws_s3_bucket_ownership_controls.this.rule[0].object_ownership == "BucketOwnerEnforced"
    error_message = "ACLs must be disabled"
  }
}

# Every key's policy lets the account administer it through IAM; only the cluster role uses the secrets key.
run "kms_keys_have_explicit_policies" {
  command = plan

  assert {
    condition = alltrue([
      for p in [one(aws_kms_key.secrets).policy, one(aws_kms_key.efs).policy] :
      jsondecode(p).Statement[0].Principal.AWS == "arn:aws:iam::123456789012:root"
    ])
    error_message = "the KMS keys must name the account root as administrator"
  }
  assert {
    condition     = jsondecode(one(aws_kms_key.secrets).policy).Statement[1].Principal.AWS == aws_iam_role.cluster.arn
    error_message = "the secrets key must let the cluster role use it"
  }
  assert {
    condition     = one(aws_efs_file_system.models).kms_key_id == one(aws_kms_key.efs).arn
    error_message = "EFS must be encrypted with its own key"
  }
  assert {
    condition     = length(aws_eks_cluster.this.enabled_cluster_log_types) == 5
    error_message = "every control-plane log type must be on"
  }
}

# The VPC module on its own: flow logs of all traffic, kept a year, encrypted, written by a role scoped to the group.
run "vpc_flow_logs_and_default_security_group" {
  command = plan

  module {
    source = "../modules/vpc"
  }

  variables {
    name               = "harnessrl"
    cidr               = "10.42.0.0/16"
    availability_zones = ["us-east-1a", "us-east-1b"]
    region             = "us-east-1"
    single_nat_gateway = true
    enable_s3_endpoint = true
    account_id         = "123456789012"
  }

  assert {
    condition     = aws_flow_log.this.traffic_type == "ALL" && aws_flow_log.this.log_destination == aws_cloudwatch_log_group.flow_logs.arn
    error_message = "the VPC must log all traffic to its flow log group"
  }
  assert {
    condition     = aws_cloudwatch_log_group.flow_logs.retention_in_days == 365 && aws_cloudwatch_log_group.flow_logs.kms_key_id == aws_kms_key.flow_logs.arn
    error_message = "flow logs must be kept 365 days by default, encrypted with their own key"
  }
  assert {
    condition = jsondecode(aws_kms_key.flow_logs.policy).Statement[1].Principal.Service == "logs.us-east-1.amazonaws.com" && (
      jsondecode(aws_kms_key.flow_logs.policy).Statement[1].Condition.ArnEquals["kms:EncryptionContext:aws:logs:arn"] ==
      "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vpc/harnessrl/flow-logs"
    )
    error_message = "the flow log key must let CloudWatch Logs use it for the flow log group only"
  }
  assert {
    condition = alltrue([
      for r in one(jsondecode(aws_iam_role_policy.flow_logs.policy).Statement).Resource :
      startswith(r, aws_cloudwatch_log_group.flow_logs.arn)
    ])
    error_message = "the flow log role must write only to its log group: ${aws_iam_role_policy.flow_logs.policy}"
  }
  assert {
    condition     = jsondecode(aws_iam_role.flow_logs.assume_role_policy).Statement[0].Principal.Service == "vpc-flow-logs.amazonaws.com"
    error_message = "only the VPC Flow Logs service may assume the flow log role"
  }
  assert {
    condition     = length(aws_default_security_group.this.ingress) == 0 && length(aws_default_security_group.this.egress) == 0
    error_message = "the default security group must have no rules"
  }
}
