"""`gcdoctor monitor`: telemetry beside a job in another process, and its record."""
