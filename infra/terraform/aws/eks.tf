# ----------------------------------------------------------------------------- EKS control plane

resource "aws_iam_role" "cluster" {
  name = "${var.cluster_name}-cluster"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "eks.amazonaws.com" }
      Action    = ["sts:AssumeRole", "sts:TagSession"]
    }]
  })
}

resource "aws_iam_role_policy_attachment" "cluster" {
  role       = aws_iam_role.cluster.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonEKSClusterPolicy"
}

resource "aws_kms_key" "secrets" {
  count                   = var.enable_secrets_encryption ? 1 : 0
  description             = "${var.cluster_name} Kubernetes secrets"
  enable_key_rotation     = true
  deletion_window_in_days = 30

  # The account administers the key through IAM (without this statement nobody could manage or delete it),
  # and the cluster role gets the four calls EKS makes for envelope encryption of secrets.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministersTheKey"
        Effect    = "Allow"
        Principal = { AWS = local.account_root_arn }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "ClusterEncryptsSecrets"
        Effect    = "Allow"
        Principal = { AWS = aws_iam_role.cluster.arn }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"]
        Resource  = "*"
      },
    ]
  })
}

resource "aws_eks_cluster" "this" {
  name     = var.cluster_name
  version  = var.kubernetes_version
  role_arn = aws_iam_role.cluster.arn

  # Every control-plane log type: scheduler and controller-manager logs are what explain a GPU pod stuck in
  # Pending or a node group that does not scale.
  enabled_cluster_log_types = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

  access_config {
    authentication_mode                         = "API"
    bootstrap_cluster_creator_admin_permissions = true
  }

  vpc_config {
    subnet_ids              = values(module.vpc.private_subnet_ids)
    endpoint_private_access = true
    endpoint_public_access  = length(var.endpoint_public_access_cidrs) > 0
    public_access_cidrs     = length(var.endpoint_public_access_cidrs) > 0 ? var.endpoint_public_access_cidrs : null
  }

  dynamic "encryption_config" {
    for_each = aws_kms_key.secrets
    content {
      resources = ["secrets"]
      provider {
        key_arn = encryption_config.value.arn
      }
    }
  }

  depends_on = [aws_iam_role_policy_attachment.cluster]
}

# IRSA: pods exchange their service-account token for IAM role credentials through this provider.
resource "aws_iam_openid_connect_provider" "eks" {
  url            = aws_eks_cluster.this.identity[0].oidc[0].issuer
  client_id_list = ["sts.amazonaws.com"]
}

locals {
  oidc_issuer_host = replace(aws_iam_openid_connect_provider.eks.url, "https://", "")
}

resource "aws_eks_access_entry" "admin" {
  for_each      = toset(var.admin_principal_arns)
  cluster_name  = aws_eks_cluster.this.name
  principal_arn = each.value
}

resource "aws_eks_access_policy_association" "admin" {
  for_each      = aws_eks_access_entry.admin
  cluster_name  = aws_eks_cluster.this.name
  principal_arn = each.value.principal_arn
  policy_arn    = "arn:${local.partition}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
  access_scope {
    type = "cluster"
  }
}

# Core add-ons as managed add-ons. vpc-cni and kube-proxy go in before any node (nodes need them to become
# Ready); coredns after the CPU nodes exist (it needs somewhere to run).
resource "aws_eks_addon" "network" {
  for_each                    = toset(["vpc-cni", "kube-proxy"])
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = each.value
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"
}

resource "aws_eks_addon" "coredns" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "coredns"
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"
  depends_on                  = [aws_eks_node_group.cpu]
}

# ----------------------------------------------------------------------------- nodes

resource "aws_iam_role" "node" {
  name = "${var.cluster_name}-node"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each = toset([
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
  ])
  role       = aws_iam_role.node.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/${each.value}"
}

resource "aws_eks_node_group" "cpu" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "${var.cluster_name}-cpu"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = values(module.vpc.private_subnet_ids)
  ami_type        = "AL2023_x86_64_STANDARD"
  instance_types  = var.cpu_node_group.instance_types
  disk_size       = var.cpu_node_group.disk_size_gib

  labels = { (local.pool_label_key) = "cpu" }

  scaling_config {
    min_size     = var.cpu_node_group.min_size
    desired_size = var.cpu_node_group.desired_size
    max_size     = var.cpu_node_group.max_size
  }

  update_config {
    max_unavailable = 1
  }

  lifecycle {
    ignore_changes = [scaling_config[0].desired_size] # an autoscaler owns it after creation
    precondition {
      condition     = local.cpu_fits
      error_message = "a cpu_node_group instance type is too small for harnessrl's largest CPU pod (harnessrl_pool_requests[\"cpu\"])."
    }
    precondition {
      condition     = length(setsubtract(keys(var.harnessrl_pool_requests), keys(local.node_pools))) == 0
      error_message = "harnessrl schedules on pools ${jsonencode(keys(var.harnessrl_pool_requests))} but the node groups provide ${jsonencode(keys(local.node_pools))}."
    }
  }

  depends_on = [aws_iam_role_policy_attachment.node, aws_eks_addon.network]
}

# EFA needs all traffic between the EFA interfaces allowed, in and out, within one security group.
resource "aws_security_group" "efa" {
  count       = var.enable_efa ? 1 : 0
  name        = "${var.cluster_name}-efa"
  description = "EFA traffic between GPU nodes"
  vpc_id      = module.vpc.vpc_id
  tags        = { Name = "${var.cluster_name}-efa" }
}

resource "aws_vpc_security_group_ingress_rule" "efa_self" {
  count                        = var.enable_efa ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
  description                  = "EFA from EFA"
}

resource "aws_vpc_security_group_egress_rule" "efa_self" {
  count                        = var.enable_efa ? 1 : 0
  security_group_id            = aws_security_group.efa[0].id
  referenced_security_group_id = aws_security_group.efa[0].id
  ip_protocol                  = "-1"
  description                  = "EFA to EFA"
}

module "gpu_node_group" {
  source   = "../modules/gpu_node_group"
  for_each = var.gpu_node_groups

  name                    = "${var.cluster_name}-${each.key}"
  cluster_name            = aws_eks_cluster.this.name
  kubernetes_version      = aws_eks_cluster.this.version
  node_role_arn           = aws_iam_role.node.arn
  subnet_id               = module.vpc.private_subnet_ids[local.gpu_az]
  instance_type           = each.value.instance_type
  min_size                = each.value.min_size
  desired_size            = each.value.desired_size
  max_size                = each.value.max_size
  capacity_type           = each.value.capacity_type
  capacity_reservation_id = each.value.capacity_reservation_id
  disk_size_gib           = each.value.disk_size_gib
  labels                  = { (local.pool_label_key) = local.gpu_instances[each.value.instance_type].pool }
  taint                   = local.gpu_taint
  efa_interfaces          = var.enable_efa ? local.gpu_instances[each.value.instance_type].efa_interfaces : 0
  security_group_ids      = concat([aws_eks_cluster.this.vpc_config[0].cluster_security_group_id], aws_security_group.efa[*].id)
  placement_group         = var.enable_placement_group
  instance                = local.gpu_instances[each.value.instance_type]
  pool_request            = lookup(var.harnessrl_pool_requests, local.gpu_instances[each.value.instance_type].pool, null)

  depends_on = [aws_iam_role_policy_attachment.node, aws_eks_addon.network]
}
