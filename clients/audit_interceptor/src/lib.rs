//! A librdkafka interceptor plugin that counts what a Kafka client handled, per (topic, window),
//! for the audit clients (`clients/audit.py`).
//!
//! librdkafka loads it through `plugin.library.paths` and calls [`plugin::conf_init`]. A client
//! whose configuration also names a tally (`uatu.audit.tally=<id>`, created beforehand with
//! [`api::uatu_tally_create`]) then counts, in librdkafka's own threads and without the Python
//! interpreter:
//!
//! * a producer, every record the broker acknowledged (`on_acknowledgement`), and every failed
//!   send as `failed_count`;
//! * a consumer, every record `poll`/`consume` returns (`on_consume`).
//!
//! Per (topic, epoch-aligned window of the record's Kafka timestamp): message count, key + value
//! bytes, an HLL_8 sketch of Spark's `xxhash64(key, value)` and a KLL sketch of latency (now −
//! record timestamp, ms), in the Apache DataSketches formats the audit job's sketches use. The
//! Python reporter drains them with [`api::uatu_tally_drain`]. The counts are the same as the
//! pure-Python `core.audit_reports.WindowTally`'s for the same records (tests/clients).

pub mod api;
mod ffi;
pub mod plugin;
pub mod tally;
