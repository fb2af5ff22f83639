#!/usr/bin/env bash
# Runs a command with the AWS emulator started for it, every SDK client pointed at it
# (AWS_ENDPOINT_URL, static test credentials, one region), and stops it afterwards.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
AWS_ENDPOINT_URL="$(bash "$here/aws.sh" start)"
trap 'bash "$here/aws.sh" stop >/dev/null 2>&1' EXIT
export AWS_ENDPOINT_URL AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
  AWS_EC2_METADATA_DISABLED=true S3_FORCE_PATH_STYLE=true
"$@"
