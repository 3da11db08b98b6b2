# The cluster provides exactly what harnessrl's configs expect: conf/infra/gpu_cluster.yaml and conf/store/s3.yaml
# are read here, so a change on either side that breaks the match fails this file.
# Runs against a mocked AWS provider: no credentials, no network.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  # Paths are relative to the root module (terraform test runs there).
  gpu_cluster_yaml = "../../../conf/infra/gpu_cluster.yaml"
  store_s3_yaml    = "../../../conf/store/s3.yaml"
}

run "cluster_matches_harnessrl_conf" {
  command = plan

  assert {
    condition     = module.gpu_node_group["h100"].labels["harnessrl.io/pool"] == yamldecode(file(var.gpu_cluster_yaml)).resources.cpt.node_selector["harnessrl.io/pool"]
    error_message = "the H100 node group's harnessrl.io/pool label is not the one the training stages select"
  }
  assert {
    condition     = aws_eks_node_group.cpu.labels["harnessrl.io/pool"] == yamldecode(file(var.gpu_cluster_yaml)).resources.default.node_selector["harnessrl.io/pool"]
    error_message = "the CPU node group's label is not the one the default stage selects"
  }
  assert {
    condition     = module.gpu_node_group["h100"].taints == toset([{ key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }])
    error_message = "GPU nodes must carry exactly the taint nvidia.com/gpu=true:NoSchedule"
  }
  # Every toleration a GPU stage carries tolerates the GPU taint, and every stage's pool exists.
  assert {
    condition = alltrue([
      for stage, r in yamldecode(file(var.gpu_cluster_yaml)).resources : alltrue([
        for t in lookup(r, "tolerations", []) : t.key == "nvidia.com/gpu" && t.effect == "NoSchedule" && t.operator == "Exists"
      ])
    ])
    error_message = "a stage's toleration does not match the GPU taint"
  }
  assert {
    condition = length(setsubtract(
      [for stage, r in yamldecode(file(var.gpu_cluster_yaml)).resources : r.node_selector["harnessrl.io/pool"]],
      keys(output.node_pools),
    )) == 0
    error_message = "gpu_cluster.yaml selects a node pool no node group provides"
  }
  assert {
    condition     = output.gpu_node_groups["h100"].ami_type == "AL2023_x86_64_NVIDIA" && aws_eks_node_group.cpu.ami_type == "AL2023_x86_64_STANDARD"
    error_message = "GPU nodes need the NVIDIA AL2023 AMI"
  }
  # Defaults: every optional part is there (flags.tftest.hcl turns them off).
  assert {
    condition = (
      length(aws_efs_file_system.models) == 1 && length(aws_kms_key.efs) == 1 && length(aws_eks_addon.efs_csi) == 1 && length(aws_iam_role.efs_csi) == 1 &&
      length(aws_security_group.efa) == 1 && length(aws_kms_key.secrets) == 1 && length(module.vpc.s3_endpoint_ids) == 1 &&
      output.gpu_node_groups["h100"].placement_group == "harnessrl-h100" && output.gpu_node_groups["h100"].efa_interfaces == 32
    )
    error_message = "a default-on part is missing: ${jsonencode(output.gpu_node_groups)}"
  }

  # ... and the rendered config says the same as conf/.
  assert {
    condition     = yamldecode(output.harnessrl_config).infra.pipeline_root == yamldecode(file(var.gpu_cluster_yaml)).pipeline_root
    error_message = "pipeline_root differs from conf/infra/gpu_cluster.yaml"
  }
  assert {
    condition     = yamldecode(output.harnessrl_config).infra.pvc == yamldecode(file(var.gpu_cluster_yaml)).pvc
    error_message = "the PVC differs from conf/infra/gpu_cluster.yaml"
  }
  assert {
    condition     = yamldecode(output.harnessrl_config).infra.secrets == yamldecode(file(var.gpu_cluster_yaml)).secrets
    error_message = "the secrets differ from conf/infra/gpu_cluster.yaml"
  }
  assert {
    condition = alltrue([
      for stage, r in yamldecode(file(var.gpu_cluster_yaml)).resources :
      yamldecode(output.harnessrl_config).infra.resources[stage].node_selector == r.node_selector &&
      lookup(yamldecode(output.harnessrl_config).infra.resources[stage], "tolerations", []) == lookup(r, "tolerations", [])
    ])
    error_message = "the rendered node selectors/tolerations differ from conf/infra/gpu_cluster.yaml"
  }
  assert {
    condition = (
      yamldecode(output.harnessrl_config).store.uri == yamldecode(file(var.store_s3_yaml)).uri &&
      yamldecode(output.harnessrl_config).store.data_remote == yamldecode(file(var.store_s3_yaml)).data_remote
    )
    error_message = "store uri/data_remote differ from conf/store/s3.yaml"
  }
}
