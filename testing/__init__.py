"""Support shared by tests/, bench/ and examples/: conf dirs, the small test session, JobGroup
builders, test data and polling. Never imported by production code."""
