# Bad input is rejected at plan time, before anything is created.

mock_provider "aws" {
  source          = "./tests/mocks"
  override_during = plan
}

run "rejects_bad_names" {
  command = plan

  variables {
    cluster_name    = "Harness_RL"
    bucket_name     = "Not_A_Bucket"
    gpu_node_groups = { "H100!" = {} }
  }

  expect_failures = [var.cluster_name, var.bucket_name, var.gpu_node_groups]
}

run "rejects_zero_gpus" {
  command = plan

  variables {
    gpu_node_groups = { h100 = { min_size = 0, desired_size = 0, max_size = 0 } }
  }

  expect_failures = [var.gpu_node_groups]
}

run "rejects_instance_types_off_the_list" {
  command = plan

  variables {
    gpu_node_groups = { h100 = { instance_type = "g4dn.xlarge" } }
    cpu_node_group  = { instance_types = ["t3.micro"] }
  }

  expect_failures = [var.gpu_node_groups, var.cpu_node_group]
}

run "rejects_inconsistent_placement" {
  command = plan

  variables {
    availability_zones = ["us-east-1a"]
    vpc_cidr           = "10.0.0.0/24"
    kubernetes_version = "1.21"
  }

  expect_failures = [var.availability_zones, var.vpc_cidr, var.kubernetes_version]
}

run "rejects_gpu_zone_outside_the_cluster" {
  command = plan

  variables {
    gpu_availability_zone = "us-east-1f"
  }

  expect_failures = [var.gpu_availability_zone]
}

run "rejects_wildcard_service_accounts" {
  command = plan

  variables {
    pipeline_service_accounts = ["kubeflow:*"]
  }

  expect_failures = [var.pipeline_service_accounts]
}

run "rejects_a_flow_log_retention_cloudwatch_does_not_offer" {
  command = plan

  variables {
    flow_log_retention_days = 42
  }

  expect_failures = [var.flow_log_retention_days]
}

# Only A100s: nothing provides the gpu-h100 pool that harnessrl's training stages select.
run "rejects_a_cluster_without_the_pool_harnessrl_selects" {
  command = plan

  variables {
    gpu_node_groups = { a100 = { instance_type = "p4d.24xlarge" } }
  }

  expect_failures = [aws_eks_node_group.cpu]
}
