# ----------------------------------------------------------------------------- network

module "vpc" {
  source = "../modules/vpc"

  name               = var.cluster_name
  cidr               = var.vpc_cidr
  availability_zones = var.availability_zones
  single_nat_gateway = var.single_nat_gateway
  enable_s3_endpoint = var.enable_s3_endpoint
  region             = var.region
}
