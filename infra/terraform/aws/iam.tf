# ----------------------------------------------------------------------------- IRSA roles

locals {
  # Trust for a role assumable only by the given service accounts' tokens from this cluster's issuer.
  irsa_trust = {
    for role, subjects in {
      pipeline = var.pipeline_service_accounts
      efs_csi  = ["kube-system:efs-csi-controller-sa", "kube-system:efs-csi-node-sa"]
    } :
    role => jsonencode({
      Version = "2012-10-17"
      Statement = [{
        Effect    = "Allow"
        Principal = { Federated = aws_iam_openid_connect_provider.eks.arn }
        Action    = "sts:AssumeRoleWithWebIdentity"
        Condition = {
          StringEquals = {
            "${local.oidc_issuer_host}:aud" = "sts.amazonaws.com"
            "${local.oidc_issuer_host}:sub" = [for sa in subjects : "system:serviceaccount:${sa}"]
          }
        }
      }]
    })
  }
}

# The pipeline role: what every harnessrl stage pod (and the KFP launcher) uses for S3. One bucket only.
resource "aws_iam_role" "pipeline" {
  name               = "${var.cluster_name}-pipeline"
  description        = "harnessrl pipeline pods (IRSA): read/write s3://${module.artifacts.name} only"
  assume_role_policy = local.irsa_trust["pipeline"]
}

resource "aws_iam_role_policy" "pipeline_bucket" {
  name   = "artifact-bucket"
  role   = aws_iam_role.pipeline.id
  policy = module.artifacts.access_policy_json
}

resource "aws_iam_role" "efs_csi" {
  count              = var.enable_efs ? 1 : 0
  name               = "${var.cluster_name}-efs-csi"
  assume_role_policy = local.irsa_trust["efs_csi"]
}

resource "aws_iam_role_policy_attachment" "efs_csi" {
  count      = var.enable_efs ? 1 : 0
  role       = aws_iam_role.efs_csi[0].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy"
}
