terraform {
  required_version = ">= 1.9" # cross-variable validation, terraform test mock_provider

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.80, < 6.0"
    }
  }

  # Configure a remote backend (S3 + DynamoDB/lockfile) per environment, e.g.
  #   terraform init -backend-config=backend.hcl
  # It is left out here so `terraform init -backend=false` and `terraform test` need nothing.
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge({ "harnessrl.io/cluster" = var.cluster_name, "managed-by" = "terraform" }, var.tags)
  }
}
