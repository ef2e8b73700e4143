"""The AWS provider: EC2 (key pair, security group, launch template, EC2 Fleet), SSM for the AMI, FIS for
interruptions. boto3 only; the same code drives real AWS and a moto server (AWS_ENDPOINT_URL)."""
