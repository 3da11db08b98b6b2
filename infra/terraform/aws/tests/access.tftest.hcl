# The artifact bucket is private, versioned and encrypted, and the pipeline role reaches that bucket and nothing else.

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
