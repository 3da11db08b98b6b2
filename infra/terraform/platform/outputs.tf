output "kfp_namespace" {
  description = "Namespace pipelines run in; the secret, PVC and kfp-launcher config live here."
  value       = local.kfp_namespace
}

output "pipeline_root" {
  description = "KFP default pipeline root (conf/infra/gpu_cluster.yaml pipeline_root)."
  value       = "s3://${var.bucket_name}/pipelines"
}

output "models_pvc" {
  description = "The models PVC name, or null without EFS."
  value       = one(kubernetes_persistent_volume_claim_v1.models[*].metadata[0].name)
}
