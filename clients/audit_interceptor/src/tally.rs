//! Per (topic, window) counts of one client, the Rust twin of `core.audit_reports.WindowTally`.

use std::collections::HashMap;
use std::sync::Mutex;

use datasketches::hll::{HllSketch, HllType};
use datasketches::kll::{KllFloat, KllSketch};
use xxhash_rust::xxh64::xxh64;

/// org.apache.spark.sql.catalyst.expressions.XxHash64's seed.
pub const SPARK_HASH_SEED: u64 = 42;
/// kll_sketch_agg_double's default k.
pub const KLL_K: u16 = 200;

/// Spark's `xxhash64(key, value)`: XXH64 of the key seeded with 42, then of the value seeded
/// with that; a null column leaves the running hash as it is.
pub fn dedupe_key(key: Option<&[u8]>, value: Option<&[u8]>) -> i64 {
    let mut h = SPARK_HASH_SEED;
    if let Some(k) = key {
        h = xxh64(k, h);
    }
    if let Some(v) = value {
        h = xxh64(v, h);
    }
    h as i64
}

/// What one (topic, window) counted since the last drain.
pub struct WindowCounts {
    pub message_count: u64,
    pub byte_count: u64,
    pub failed_count: u64,
    pub hll: Option<HllSketch>,
    pub kll: Option<KllSketch<KllFloat<f64>>>,
}

impl WindowCounts {
    fn new() -> Self {
        WindowCounts { message_count: 0, byte_count: 0, failed_count: 0, hll: None, kll: None }
    }
}

/// A client's counts; record* are called from librdkafka's threads, drain from the reporter's.
pub struct Tally {
    window_ms: i64,
    lg_k: u8,
    topics: Mutex<HashMap<String, HashMap<i64, WindowCounts>>>,
}

impl Tally {
    /// `window_seconds` > 0 and `lg_k` in 4..=21, as `WindowTally` checks.
    pub fn new(window_seconds: i64, lg_k: u8) -> Result<Tally, String> {
        if window_seconds <= 0 {
            return Err(format!("window_seconds={window_seconds}: must be > 0"));
        }
        if !(4..=21).contains(&lg_k) {
            return Err(format!("lg_k={lg_k}: must be in 4..21"));
        }
        Ok(Tally { window_ms: window_seconds * 1000, lg_k, topics: Mutex::new(HashMap::new()) })
    }

    pub fn window_start(&self, timestamp_ms: i64) -> i64 {
        timestamp_ms - timestamp_ms.rem_euclid(self.window_ms)
    }

    fn with_window<R>(&self, topic: &str, timestamp_ms: i64, f: impl FnOnce(&mut WindowCounts) -> R) -> R {
        let start = self.window_start(timestamp_ms);
        let mut topics = self.topics.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let windows = match topics.get_mut(topic) {
            Some(windows) => windows,
            None => topics.entry(topic.to_owned()).or_default(),
        };
        f(windows.entry(start).or_insert_with(WindowCounts::new))
    }

    /// Count one record (acknowledged or consumed), placed by its Kafka timestamp.
    pub fn record(&self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>, timestamp_ms: i64, latency_ms: f64) {
        // Hash outside the lock: it is the per-record work.
        let hash = dedupe_key(key, value);
        let bytes = key.map_or(0, |k| k.len()) + value.map_or(0, |v| v.len());
        let lg_k = self.lg_k;
        self.with_window(topic, timestamp_ms, |counts| {
            counts.message_count += 1;
            counts.byte_count += bytes as u64;
            counts
                .hll
                .get_or_insert_with(|| HllSketch::new(lg_k, HllType::Hll8).expect("lg_k checked in new"))
                .update(hash);
            if let Ok(latency) = KllFloat::<f64>::new(latency_ms) {
                counts
                    .kll
                    .get_or_insert_with(|| KllSketch::new(KLL_K).expect("KLL_K is valid"))
                    .update(latency);
            }
        });
    }

    /// Count one send that failed (not in message_count).
    pub fn record_failed(&self, topic: &str, timestamp_ms: i64) {
        self.with_window(topic, timestamp_ms, |counts| counts.failed_count += 1);
    }

    /// Everything counted since the previous drain, as (topic, window start ms, counts); the
    /// tally restarts.
    pub fn drain(&self) -> Vec<(String, i64, WindowCounts)> {
        let topics = {
            let mut guard = self.topics.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            std::mem::take(&mut *guard)
        };
        let mut drained = Vec::new();
        for (topic, windows) in topics {
            for (start, counts) in windows {
                drained.push((topic.clone(), start, counts));
            }
        }
        drained.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        drained
    }
}

/// The drain's wire format for the Python side (little-endian): u32 window count, then per
/// window: u32 topic length, topic (UTF-8), i64 window start ms, u64 messages, u64 bytes,
/// u64 failed, u32 HLL length, HLL (DataSketches HLL_8, empty if no message), u32 KLL length,
/// KLL (DataSketches KLL doubles, empty if no latency).
pub fn encode(drained: &[(String, i64, WindowCounts)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(drained.len() as u32).to_le_bytes());
    for (topic, start, counts) in drained {
        out.extend_from_slice(&(topic.len() as u32).to_le_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&counts.message_count.to_le_bytes());
        out.extend_from_slice(&counts.byte_count.to_le_bytes());
        out.extend_from_slice(&counts.failed_count.to_le_bytes());
        let hll = counts.hll.as_ref().map(|s| s.serialize()).unwrap_or_default();
        out.extend_from_slice(&(hll.len() as u32).to_le_bytes());
        out.extend_from_slice(&hll);
        let kll = counts.kll.as_ref().map(|s| s.serialize()).unwrap_or_default();
        out.extend_from_slice(&(kll.len() as u32).to_le_bytes());
        out.extend_from_slice(&kll);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_key_matches_sparks_xxhash64() {
        // Spark: SELECT xxhash64(CAST('k' AS BINARY), CAST('v' AS BINARY)), and of a null key.
        // The Python twin (core.audit_reports.dedupe_key) is checked against Spark in
        // tests/core; here against the same chained XXH64 computed step by step.
        let step = xxh64(b"v", xxh64(b"k", 42));
        assert_eq!(dedupe_key(Some(b"k"), Some(b"v")), step as i64);
        assert_eq!(dedupe_key(None, Some(b"v")), xxh64(b"v", 42) as i64);
        assert_eq!(dedupe_key(None, None), 42);
        assert_ne!(dedupe_key(Some(b""), None), dedupe_key(None, None));
    }

    #[test]
    fn records_land_in_their_windows_and_drain_restarts() {
        let tally = Tally::new(60, 12).unwrap();
        tally.record("t", Some(b"k"), Some(b"vv"), 59_999, 1.0);
        tally.record("t", None, Some(b"vv"), 60_000, 2.0);
        tally.record("t", None, Some(b"vv"), 60_001, 3.0);
        tally.record_failed("t", 61_000);
        let drained = tally.drain();
        let summary: Vec<_> = drained
            .iter()
            .map(|(t, s, c)| (t.as_str(), *s, c.message_count, c.byte_count, c.failed_count))
            .collect();
        assert_eq!(summary, vec![("t", 0, 1, 3, 0), ("t", 60_000, 2, 4, 1)]);
        assert!((drained[1].2.hll.as_ref().unwrap().estimate() - 1.0).abs() < 1e-9);
        assert_eq!(drained[1].2.kll.as_ref().unwrap().n(), 2);
        assert!(tally.drain().is_empty());
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(Tally::new(0, 12).is_err());
        assert!(Tally::new(60, 3).is_err());
        assert!(Tally::new(60, 22).is_err());
    }
}
