# ----------------------------------------------------------------------------- from ../aws (terraform output -raw platform_tfvars)

variable "cluster_name" {
  description = "EKS cluster name."
  type        = string
}

variable "region" {
  description = "AWS region of the cluster and bucket."
  type        = string
}

variable "cluster_endpoint" {
  description = "Kubernetes API endpoint."
  type        = string
}

variable "cluster_ca_certificate" {
  description = "Base64 cluster CA certificate."
  type        = string
}

variable "pipeline_role_arn" {
  description = "IRSA role the pipeline service accounts are annotated with."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$", var.pipeline_role_arn))
    error_message = "pipeline_role_arn must be an IAM role ARN."
  }
}

variable "pipeline_service_accounts" {
  description = "namespace:name of the service accounts pipeline pods run as (KFP standalone: kubeflow:pipeline-runner)."
  type        = list(string)
  default     = ["kubeflow:pipeline-runner"]

  validation {
    condition     = length(var.pipeline_service_accounts) > 0 && alltrue([for sa in var.pipeline_service_accounts : can(regex("^[a-z0-9-]+:[a-z0-9.-]+$", sa))])
    error_message = "pipeline_service_accounts must be namespace:name entries."
  }
}

variable "bucket_name" {
  description = "Artifact bucket; pipeline_root is s3://<bucket>/pipelines."
  type        = string
}

variable "efs_file_system_id" {
  description = "EFS file system for the harnessrl-models PVC; null skips the StorageClass and PVC."
  type        = string
  default     = null
}

variable "pvc_name" {
  description = "The models PVC (conf/infra/gpu_cluster.yaml pvc.name)."
  type        = string
  default     = "harnessrl-models"
}

variable "s3_secret_name" {
  description = "The secret every stage reads AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from (conf/infra/gpu_cluster.yaml secrets)."
  type        = string
  default     = "harnessrl-s3"
}

variable "enable_efa_device_plugin" {
  description = "Install the AWS EFA device plugin (set when ../aws has enable_efa)."
  type        = bool
  default     = true
}

variable "gpu_taint_key" {
  description = "The GPU nodes' NoSchedule taint key; the device plugins tolerate it."
  type        = string
  default     = "nvidia.com/gpu"
}

variable "gpu_pools" {
  description = "harnessrl.io/pool values of the GPU node groups; the device plugins run there."
  type        = list(string)
  default     = ["gpu-h100"]

  validation {
    condition     = length(var.gpu_pools) > 0 && alltrue([for p in var.gpu_pools : can(regex("^gpu-[a-z0-9]+$", p))])
    error_message = "gpu_pools must name at least one pool like gpu-h100."
  }
}

# ----------------------------------------------------------------------------- add-ons

variable "enable_nvidia_device_plugin" {
  description = "NVIDIA device plugin (advertises nvidia.com/gpu). The AL2023 NVIDIA AMI has the driver and toolkit, not the plugin."
  type        = bool
  default     = true
}

variable "enable_kuberay" {
  description = "KubeRay operator (RayCluster/RayJob for the RL stage's rollout workers)."
  type        = bool
  default     = true
}

variable "enable_kfp" {
  description = "Kubeflow Pipelines standalone (platform-agnostic manifests) in namespace kubeflow, applied with kubectl."
  type        = bool
  default     = true
}

variable "enable_trainer" {
  description = "Kubeflow Trainer v2 (TrainJob) controller, applied with kubectl."
  type        = bool
  default     = true
}

variable "nvidia_device_plugin_version" {
  description = "nvidia-device-plugin Helm chart version."
  type        = string
  default     = "0.17.1"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.nvidia_device_plugin_version))
    error_message = "nvidia_device_plugin_version must be a pinned version like 1.2.3."
  }
}

variable "efa_device_plugin_version" {
  description = "aws-efa-k8s-device-plugin Helm chart version."
  type        = string
  default     = "0.5.7"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.efa_device_plugin_version))
    error_message = "efa_device_plugin_version must be a pinned version like 1.2.3."
  }
}

variable "kuberay_version" {
  description = "kuberay-operator Helm chart version."
  type        = string
  default     = "1.3.2"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.kuberay_version))
    error_message = "kuberay_version must be a pinned version like 1.2.3."
  }
}

variable "kfp_version" {
  description = "Kubeflow Pipelines manifests git ref."
  type        = string
  default     = "2.4.0"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.kfp_version))
    error_message = "kfp_version must be a pinned version like 1.2.3."
  }
}

variable "trainer_version" {
  description = "Kubeflow Trainer manifests git ref: the release of the kubeflow-trainer-api models harnessrl builds TrainJobs from (pyproject.toml)."
  type        = string
  default     = "v2.3.0"

  validation {
    condition     = can(regex("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", var.trainer_version))
    error_message = "trainer_version must be a pinned version like 1.2.3."
  }
}

variable "trainer_runtime" {
  description = "The ClusterTrainingRuntime harnessrl's multi-node CPT and SFT run on (gpu_cluster.yaml trainjob.runtime); apply checks it exists."
  type        = string
  default     = "torch-distributed"
}

variable "models_pvc_size" {
  description = "Requested size of the models PVC (EFS is elastic; Kubernetes needs a number)."
  type        = string
  default     = "2Ti"
}

variable "s3_static_credentials" {
  description = "Static keys for the harnessrl-s3 secret, for clusters without IRSA. null (the default): the secret holds empty values, botocore skips them and uses the IRSA role."
  type        = object({ access_key_id = string, secret_access_key = string })
  default     = null
  sensitive   = true
}
