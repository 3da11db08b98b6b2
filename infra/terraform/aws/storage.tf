# ----------------------------------------------------------------------------- storage

module "artifacts" {
  source = "../modules/artifact_bucket"

  name                               = var.bucket_name
  partition                          = local.partition
  force_destroy                      = var.bucket_force_destroy
  noncurrent_version_expiration_days = var.noncurrent_version_expiration_days
}

# EFS backs the ReadWriteMany PVC harnessrl-models (conf/infra/gpu_cluster.yaml pvc), mounted at /models on
# every stage's pod. The StorageClass and the PVC itself are made by ../platform.
resource "aws_efs_file_system" "models" {
  count            = var.enable_efs ? 1 : 0
  creation_token   = "${var.cluster_name}-models"
  encrypted        = true
  performance_mode = "generalPurpose"
  throughput_mode  = "elastic"
  tags             = { Name = "${var.cluster_name}-models" }
}

resource "aws_security_group" "efs" {
  count       = var.enable_efs ? 1 : 0
  name        = "${var.cluster_name}-efs"
  description = "NFS from the cluster to the models file system"
  vpc_id      = module.vpc.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "efs_nfs" {
  count             = var.enable_efs ? 1 : 0
  security_group_id = aws_security_group.efs[0].id
  cidr_ipv4         = module.vpc.vpc_cidr
  ip_protocol       = "tcp"
  from_port         = 2049
  to_port           = 2049
  description       = "NFS from the VPC"
}

resource "aws_efs_mount_target" "models" {
  for_each        = var.enable_efs ? module.vpc.private_subnet_ids : {}
  file_system_id  = aws_efs_file_system.models[0].id
  subnet_id       = each.value
  security_groups = [aws_security_group.efs[0].id]
}

resource "aws_eks_addon" "efs_csi" {
  count                       = var.enable_efs ? 1 : 0
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "aws-efs-csi-driver"
  service_account_role_arn    = aws_iam_role.efs_csi[0].arn
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"
  depends_on                  = [aws_eks_node_group.cpu]
}
