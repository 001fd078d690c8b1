"""The probes (experiments), in one explicit table. Each module holds one probe."""
