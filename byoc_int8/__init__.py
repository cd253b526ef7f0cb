"""byoc-int8."""
