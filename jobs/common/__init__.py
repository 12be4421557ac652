"""Plumbing shared by every job: configuration, JobGroup validation, session and runner."""
