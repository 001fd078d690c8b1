"""A diagnose run: the session and its probes' context, one measured step, the event bus, the run directory, the plain console, several processes."""
