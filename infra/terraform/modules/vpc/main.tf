# A VPC with one private subnet per zone (nodes and pods) and one small public subnet per zone (NAT only).

variable "name" {
  description = "Name prefix and the EKS cluster name for subnet discovery tags."
  type        = string
}

variable "cidr" {
  description = "VPC CIDR (/16 or larger)."
  type        = string
}

variable "availability_zones" {
  description = "Zones, one private and one public subnet each."
  type        = list(string)
}

variable "region" {
  description = "Region, for the S3 endpoint service name."
  type        = string
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all zones."
  type        = bool
}

variable "enable_s3_endpoint" {
  description = "Add an S3 gateway endpoint to the private route tables."
  type        = bool
}

locals {
  azs = { for i, az in var.availability_zones : az => i }
  # /16 -> private /18s at indices 0..3 (16k IPs each: the VPC CNI gives every pod a VPC IP),
  # public /24s carved from the last /18.
  private_cidrs = { for az, i in local.azs : az => cidrsubnet(var.cidr, 2, i) }
  public_cidrs  = { for az, i in local.azs : az => cidrsubnet(cidrsubnet(var.cidr, 2, 3), 6, i) }
  nat_azs       = var.single_nat_gateway ? [var.availability_zones[0]] : var.availability_zones
}

resource "aws_vpc" "this" {
  cidr_block           = var.cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = var.name }

  lifecycle {
    precondition {
      condition     = length(var.availability_zones) <= 3
      error_message = "this layout fits at most 3 zones (the 4th /18 holds the public subnets)."
    }
  }
}

resource "aws_subnet" "private" {
  for_each          = local.private_cidrs
  vpc_id            = aws_vpc.this.id
  availability_zone = each.key
  cidr_block        = each.value
  tags = {
    Name                                = "${var.name}-private-${each.key}"
    "kubernetes.io/role/internal-elb"   = "1"
    "kubernetes.io/cluster/${var.name}" = "shared"
  }
}

resource "aws_subnet" "public" {
  for_each          = local.public_cidrs
  vpc_id            = aws_vpc.this.id
  availability_zone = each.key
  cidr_block        = each.value
  tags = {
    Name                                = "${var.name}-public-${each.key}"
    "kubernetes.io/role/elb"            = "1"
    "kubernetes.io/cluster/${var.name}" = "shared"
  }
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = var.name }
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = "${var.name}-public" }
}

resource "aws_route" "public_internet" {
  route_table_id         = aws_route_table.public.id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this.id
}

resource "aws_route_table_association" "public" {
  for_each       = aws_subnet.public
  subnet_id      = each.value.id
  route_table_id = aws_route_table.public.id
}

resource "aws_eip" "nat" {
  for_each = toset(local.nat_azs)
  domain   = "vpc"
  tags     = { Name = "${var.name}-nat-${each.key}" }
}

resource "aws_nat_gateway" "this" {
  for_each      = toset(local.nat_azs)
  allocation_id = aws_eip.nat[each.key].id
  subnet_id     = aws_subnet.public[each.key].id
  tags          = { Name = "${var.name}-${each.key}" }
  depends_on    = [aws_internet_gateway.this]
}

resource "aws_route_table" "private" {
  for_each = local.private_cidrs
  vpc_id   = aws_vpc.this.id
  tags     = { Name = "${var.name}-private-${each.key}" }
}

resource "aws_route" "private_nat" {
  for_each               = aws_route_table.private
  route_table_id         = each.value.id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[var.single_nat_gateway ? var.availability_zones[0] : each.key].id
}

resource "aws_route_table_association" "private" {
  for_each       = aws_subnet.private
  subnet_id      = each.value.id
  route_table_id = aws_route_table.private[each.key].id
}

resource "aws_vpc_endpoint" "s3" {
  count             = var.enable_s3_endpoint ? 1 : 0
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [for rt in aws_route_table.private : rt.id]
  tags              = { Name = "${var.name}-s3" }
}

output "vpc_id" {
  description = "VPC id."
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "VPC CIDR."
  value       = aws_vpc.this.cidr_block
}

output "private_subnet_ids" {
  description = "Private subnet id by zone."
  value       = { for az, s in aws_subnet.private : az => s.id }
}

output "s3_endpoint_ids" {
  description = "The S3 gateway endpoint's id, or no ids."
  value       = aws_vpc_endpoint.s3[*].id
}
