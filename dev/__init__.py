"""Build scripts run by the Makefile: jar pruning and folding, the --py-files zip, the protobuf
fingerprint and the JVM class-data sharing archive."""
