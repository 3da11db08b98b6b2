# The one S3 bucket harnessrl writes to: pipelines/ (KFP pipeline_root), checkpoints/ (store.uri), dvc/
# (store.data_remote). Versioned, encrypted, never public, TLS only. Also renders the IAM policy that grants
# access to this bucket and nothing else.

variable "name" {
  description = "Bucket name."
  type        = string
}

variable "partition" {
  description = "AWS partition (aws, aws-cn, aws-us-gov), for ARNs."
  type        = string
  default     = "aws"
}

variable "force_destroy" {
  description = "Let destroy delete a non-empty bucket."
  type        = bool
  default     = false
}

variable "noncurrent_version_expiration_days" {
  description = "Expire noncurrent versions after this many days."
  type        = number
  default     = 30
}

resource "aws_s3_bucket" "this" {
  # checkov:skip=CKV_AWS_18: access logging needs a second bucket to log into, and that bucket fails the same check in turn; CloudTrail data events are the audit trail if one is needed.
  # checkov:skip=CKV2_AWS_62: nothing consumes event notifications for this bucket; harnessrl tracks what it writes through KFP, DVC and lineage.
  # checkov:skip=CKV_AWS_144: cross-region replication is out of scope for a scratch artifacts bucket: its contents can be regenerated from DVC and lineage.
  bucket        = var.name
  force_destroy = var.force_destroy
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket                  = aws_s3_bucket.this.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "aws:kms" # the AWS-managed aws/s3 key; bucket keys keep KMS calls (and cost) down
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket     = aws_s3_bucket.this.id
  depends_on = [aws_s3_bucket_versioning.this]

  rule {
    id     = "tidy"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }
  }
}

locals {
  arn = "arn:${var.partition}:s3:::${aws_s3_bucket.this.bucket}"

  # Read/write of objects in this bucket, and listing it. No bucket administration, no other bucket.
  access_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "ListTheBucket"
        Effect   = "Allow"
        Action   = ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"]
        Resource = [local.arn]
      },
      {
        Sid    = "ObjectsInTheBucket"
        Effect = "Allow"
        Action = [
          "s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject",
          "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
        ]
        Resource = ["${local.arn}/*"]
      },
    ]
  })
}

resource "aws_s3_bucket_policy" "tls_only" {
  bucket     = aws_s3_bucket.this.id
  depends_on = [aws_s3_bucket_public_access_block.this]
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "DenyInsecureTransport"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [local.arn, "${local.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
}

output "name" {
  description = "Bucket name."
  value       = aws_s3_bucket.this.bucket
}

output "arn" {
  description = "Bucket ARN."
  value       = local.arn
}

output "access_policy_json" {
  description = "IAM policy JSON granting object read/write on this bucket only."
  value       = local.access_policy
}
