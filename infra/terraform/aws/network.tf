# ----------------------------------------------------------------------------- network

module "vpc" {
  source = "../modules/vpc"

  name               = var.cluster_name
  cidr               = var.vpc_cidr
  availability_zones = var.availability_zones
  single_nat_gateway = var.single_nat_gateway
  enable_s3_endpoint = var.enable_s3_endpoint
  region             = var.region

  partition               = local.partition
  account_id              = local.account_id
  flow_log_retention_days = var.flow_log_retention_days
}
