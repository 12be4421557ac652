"""Real services on 127.0.0.1 for tests, benches and by hand: Kafka (KRaft), ZooKeeper, etcd,
kafka-pixy, Burrow, MirrorMaker 2, a Spark standalone cluster, Prometheus, headless Chromium
and a gRPC sink. Never imported by production code. `devservices/README.md` has one short
section per service."""
