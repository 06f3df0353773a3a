"""What a run did, read back (ML Metadata, the artifacts): the run report, the past runs and the
HTML page."""
