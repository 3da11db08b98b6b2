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

variable "partition" {
  description = "AWS partition (aws, aws-cn, aws-us-gov), for ARNs."
  type        = string
  default     = "aws"
}

variable "account_id" {
  description = "The account the VPC lives in, for the flow log key policy and role trust."
  type        = string
}

variable "flow_log_retention_days" {
  description = "Days CloudWatch keeps the VPC flow logs."
  type        = number
  default     = 365
}

locals {
  azs = { for i, az in var.availability_zones : az => i }
  # /16 -> private /18s at indices 0..3 (16k IPs each: the VPC CNI gives every pod a VPC IP),
  # public /24s carved from the last /18.
  private_cidrs = { for az, i in local.azs : az => cidrsubnet(var.cidr, 2, i) }
  public_cidrs  = { for az, i in local.azs : az => cidrsubnet(cidrsubnet(var.cidr, 2, 3), 6, i) }
  nat_azs       = var.single_nat_gateway ? [var.availability_zones[0]] : var.availability_zones

  # Built from the name, not read from the log group: the key policy needs it before the group exists.
  flow_log_group_name = "/aws/vpc/${var.name}/flow-logs"
  flow_log_group_arn  = "arn:${var.partition}:logs:${var.region}:${var.account_id}:log-group:${local.flow_log_group_name}"
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
  # checkov:skip=CKV2_AWS_19: the address belongs to the NAT gateway below (allocation_id), not to an EC2 instance; the check only counts instance attachments.
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

# The default security group of a new VPC lets its members talk to each other and everywhere out. Nothing here
# uses it (nodes, EFS and EFA have their own groups), so take its rules away: a resource that lands in it by
# accident gets no traffic instead of all of it. The empty lists make "no rules" explicit in config and plan.
resource "aws_default_security_group" "this" {
  vpc_id  = aws_vpc.this.id
  ingress = []
  egress  = []
  tags    = { Name = "${var.name}-default-unused" }
}

# ----------------------------------------------------------------------------- flow logs

# Flow logs of all traffic (accepted and rejected) in the VPC, to a CloudWatch log group encrypted with a key of
# its own: the record of what talked to what, for incident response.
resource "aws_kms_key" "flow_logs" {
  description             = "${var.name} VPC flow logs"
  enable_key_rotation     = true
  deletion_window_in_days = 30

  # The account administers the key through IAM; CloudWatch Logs in this region may use it, but only for this
  # one log group (the encryption context names the group).
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministersTheKey"
        Effect    = "Allow"
        Principal = { AWS = "arn:${var.partition}:iam::${var.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsEncryptsTheFlowLogGroup"
        Effect    = "Allow"
        Principal = { Service = "logs.${var.region}.amazonaws.com" }
        Action    = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = { ArnEquals = { "kms:EncryptionContext:aws:logs:arn" = local.flow_log_group_arn } }
      },
    ]
  })
}

resource "aws_cloudwatch_log_group" "flow_logs" {
  name              = local.flow_log_group_name
  retention_in_days = var.flow_log_retention_days
  kms_key_id        = aws_kms_key.flow_logs.arn
}

# The VPC Flow Logs service writes with this role, and only into the one log group. The trust is limited to
# flow logs of this account in this region (the confused-deputy conditions AWS recommends).
resource "aws_iam_role" "flow_logs" {
  name = "${var.name}-vpc-flow-logs"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "vpc-flow-logs.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = {
        StringEquals = { "aws:SourceAccount" = var.account_id }
        ArnLike      = { "aws:SourceArn" = "arn:${var.partition}:ec2:${var.region}:${var.account_id}:vpc-flow-log/*" }
      }
    }]
  })
}

resource "aws_iam_role_policy" "flow_logs" {
  name = "flow-log-group"
  role = aws_iam_role.flow_logs.id
  # The group exists already (above), so no logs:CreateLogGroup; the streams, one per interface, are named by
  # the service, hence the streams of this group rather than a list of names.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "WriteTheFlowLogGroup"
      Effect   = "Allow"
      Action   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
      Resource = [aws_cloudwatch_log_group.flow_logs.arn, "${aws_cloudwatch_log_group.flow_logs.arn}:log-stream:*"]
    }]
  })
}

resource "aws_flow_log" "this" {
  vpc_id               = aws_vpc.this.id
  traffic_type         = "ALL"
  log_destination_type = "cloud-watch-logs"
  log_destination      = aws_cloudwatch_log_group.flow_logs.arn
  iam_role_arn         = aws_iam_role.flow_logs.arn
  tags                 = { Name = var.name }
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
