# In-cluster add-ons and the objects harnessrl's configs name. Apply after ../aws; see ../README.md.
# Only hashicorp/helm, hashicorp/kubernetes and built-in terraform_data (kubectl, for the add-ons that ship
# kustomize manifests rather than Helm charts).

locals {
  kfp_namespace = split(":", var.pipeline_service_accounts[0])[0]

  gpu_tolerations = [{ key = var.gpu_taint_key, operator = "Exists", effect = "NoSchedule" }]
  # Run device plugins only on the harnessrl GPU pools.
  gpu_affinity = {
    nodeAffinity = {
      requiredDuringSchedulingIgnoredDuringExecution = {
        nodeSelectorTerms = [{
          matchExpressions = [{ key = "harnessrl.io/pool", operator = "In", values = var.gpu_pools }]
        }]
      }
    }
  }
  cpu_node_selector = { "harnessrl.io/pool" = "cpu" }

  # kubectl against this cluster, for the kustomize installs.
  kubectl_env = {
    KUBECONFIG = "${path.root}/.terraform/kubeconfig-${var.cluster_name}"
  }
  kubeconfig_cmd = "aws eks update-kubeconfig --region ${var.region} --name ${var.cluster_name} --kubeconfig \"$KUBECONFIG\""
}

# ----------------------------------------------------------------------------- GPUs

resource "helm_release" "nvidia_device_plugin" {
  count            = var.enable_nvidia_device_plugin ? 1 : 0
  name             = "nvidia-device-plugin"
  repository       = "https://nvidia.github.io/k8s-device-plugin"
  chart            = "nvidia-device-plugin"
  version          = var.nvidia_device_plugin_version
  namespace        = "nvidia-device-plugin"
  create_namespace = true

  values = [yamlencode({
    tolerations = local.gpu_tolerations
    affinity    = local.gpu_affinity # the chart's default wants NFD labels, which EKS nodes lack
  })]
}

resource "helm_release" "efa_device_plugin" {
  count      = var.enable_efa_device_plugin ? 1 : 0
  name       = "aws-efa-k8s-device-plugin"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-efa-k8s-device-plugin"
  version    = var.efa_device_plugin_version
  namespace  = "kube-system"

  values = [yamlencode({
    tolerations = local.gpu_tolerations
    affinity    = local.gpu_affinity
  })]
}

# ----------------------------------------------------------------------------- operators

resource "helm_release" "kuberay" {
  count            = var.enable_kuberay ? 1 : 0
  name             = "kuberay-operator"
  repository       = "https://ray-project.github.io/kuberay-helm/"
  chart            = "kuberay-operator"
  version          = var.kuberay_version
  namespace        = "kuberay-system"
  create_namespace = true

  values = [yamlencode({ nodeSelector = local.cpu_node_selector })]
}

# Kubeflow Pipelines ships kustomize manifests, not a chart: the documented standalone install.
resource "terraform_data" "kfp" {
  count            = var.enable_kfp ? 1 : 0
  triggers_replace = [var.kfp_version, var.cluster_name]

  provisioner "local-exec" {
    environment = local.kubectl_env
    command     = <<-EOT
      set -eu
      ${local.kubeconfig_cmd}
      kubectl apply -k "github.com/kubeflow/pipelines/manifests/kustomize/cluster-scoped-resources?ref=${var.kfp_version}"
      kubectl wait --for condition=established --timeout=120s crd/applications.app.k8s.io
      kubectl apply -k "github.com/kubeflow/pipelines/manifests/kustomize/env/platform-agnostic?ref=${var.kfp_version}"
      kubectl -n ${local.kfp_namespace} rollout status deploy/ml-pipeline --timeout=600s
    EOT
  }
}

resource "terraform_data" "trainer" {
  count            = var.enable_trainer ? 1 : 0
  triggers_replace = [var.trainer_version, var.cluster_name]

  provisioner "local-exec" {
    environment = local.kubectl_env
    command     = <<-EOT
      set -eu
      ${local.kubeconfig_cmd}
      kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=${var.trainer_version}"
      # The runtimes' CRD must be served before they apply; a failed apply fails the resource, never passes.
      kubectl wait --for condition=established --timeout=120s crd/clustertrainingruntimes.trainer.kubeflow.org
      kubectl -n kubeflow-system rollout status deploy/kubeflow-trainer-controller-manager --timeout=600s
      kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref=${var.trainer_version}"
      # The runtime harnessrl's TrainJobs name (conf/infra/gpu_cluster.yaml trainjob.runtime).
      kubectl get clustertrainingruntime ${var.trainer_runtime}
    EOT
  }
}

# ----------------------------------------------------------------------------- what harnessrl's configs name

# The stages create their jobs themselves (harnessrl/cluster): multi-node CPT/SFT as TrainJobs, async RL
# as RayJobs, owned by the stage's pod (hence reading pods). The pipeline's service accounts may do that,
# and only that, in the pipelines' namespace, where conf/infra/gpu_cluster.yaml creates them.
resource "kubernetes_role_v1" "harnessrl_jobs" {
  metadata {
    name      = "harnessrl-jobs"
    namespace = local.kfp_namespace
  }
  rule {
    api_groups = ["trainer.kubeflow.org"]
    resources  = ["trainjobs"]
    verbs      = ["create", "get", "list", "watch", "delete"]
  }
  rule {
    api_groups = ["ray.io"]
    resources  = ["rayjobs"]
    verbs      = ["create", "get", "list", "watch", "delete"]
  }
  rule {
    api_groups = [""]
    resources  = ["pods"]
    verbs      = ["get"]
  }
  depends_on = [terraform_data.kfp]
}

resource "kubernetes_role_binding_v1" "harnessrl_jobs" {
  metadata {
    name      = "harnessrl-jobs"
    namespace = local.kfp_namespace
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.harnessrl_jobs.metadata[0].name
  }
  dynamic "subject" {
    for_each = var.pipeline_service_accounts
    content {
      kind      = "ServiceAccount"
      name      = split(":", subject.value)[1]
      namespace = split(":", subject.value)[0]
    }
  }
}

# IRSA: pods running as these service accounts get the pipeline role (one bucket).
resource "kubernetes_annotations" "pipeline_irsa" {
  for_each    = toset(var.pipeline_service_accounts)
  api_version = "v1"
  kind        = "ServiceAccount"
  metadata {
    namespace = split(":", each.value)[0]
    name      = split(":", each.value)[1]
  }
  annotations = { "eks.amazonaws.com/role-arn" = var.pipeline_role_arn }
  force       = true
  depends_on  = [terraform_data.kfp]
}

# Every stage maps this secret into AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (conf/infra/gpu_cluster.yaml).
# With IRSA the values are empty: botocore's environment provider skips an empty AWS_ACCESS_KEY_ID and the
# chain falls through to the web identity token, i.e. the pipeline role. Static keys only without IRSA.
resource "kubernetes_secret_v1" "s3" {
  metadata {
    name      = var.s3_secret_name
    namespace = local.kfp_namespace
  }
  data = {
    access_key = var.s3_static_credentials == null ? "" : var.s3_static_credentials.access_key_id
    secret_key = var.s3_static_credentials == null ? "" : var.s3_static_credentials.secret_access_key
  }
  depends_on = [terraform_data.kfp]
}

# KFP's launcher writes artifacts under pipeline_root; point it at the bucket, credentials from the pod (IRSA).
resource "kubernetes_config_map_v1" "kfp_launcher" {
  count = var.enable_kfp ? 1 : 0
  metadata {
    name      = "kfp-launcher"
    namespace = local.kfp_namespace
  }
  data = {
    defaultPipelineRoot = "s3://${var.bucket_name}/pipelines"
    providers = yamlencode({
      s3 = {
        default = {
          endpoint    = "s3.${var.region}.amazonaws.com"
          region      = var.region
          disableSSL  = false
          credentials = { fromEnv = true }
        }
      }
    })
  }
  depends_on = [terraform_data.kfp]
}

resource "kubernetes_storage_class_v1" "efs" {
  count = var.efs_file_system_id == null ? 0 : 1
  metadata {
    name = "harnessrl-efs"
  }
  storage_provisioner = "efs.csi.aws.com"
  reclaim_policy      = "Retain" # model weights outlive a PVC
  parameters = {
    provisioningMode = "efs-ap"
    fileSystemId     = var.efs_file_system_id
    directoryPerms   = "775"
  }
}

# Model weights, mounted at /models on every stage (conf/infra/gpu_cluster.yaml pvc).
resource "kubernetes_persistent_volume_claim_v1" "models" {
  count = var.efs_file_system_id == null ? 0 : 1
  metadata {
    name      = var.pvc_name
    namespace = local.kfp_namespace
  }
  spec {
    access_modes       = ["ReadWriteMany"]
    storage_class_name = kubernetes_storage_class_v1.efs[0].metadata[0].name
    resources {
      requests = { storage = var.models_pvc_size }
    }
  }
  wait_until_bound = false
  depends_on       = [terraform_data.kfp]
}
