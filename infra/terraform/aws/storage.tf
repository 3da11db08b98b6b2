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
# A key of our own rather than aws/elasticfilesystem: its policy and rotation are ours to set, and the model
# weights stay readable only to principals this account grants it to.
resource "aws_kms_key" "efs" {
  count                   = var.enable_efs ? 1 : 0
  description             = "${var.cluster_name} models file system"
  enable_key_rotation     = true
  deletion_window_in_days = 30

  # EFS uses the key through grants it creates with the permissions of whoever creates the file system, so the
  # account administering the key through IAM is all it needs.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministersTheKey"
      Effect    = "Allow"
      Principal = { AWS = local.account_root_arn }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

resource "aws_efs_file_system" "models" {
  count            = var.enable_efs ? 1 : 0
  creation_token   = "${var.cluster_name}-models"
  encrypted        = true
  kms_key_id       = aws_kms_key.efs[0].arn
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
