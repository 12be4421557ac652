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

/// Latencies below this many whole milliseconds are counted per value (see `Latencies`).
const LATENCY_BUCKETS: usize = 4096;

/// The latencies of one window. A KLL update per record was a third of the plugin's cost on
/// librdkafka's thread; latencies are whole milliseconds and mostly small, so they are counted
/// per value here and go into the sketch at drain, in ascending order (which KLL's error bound
/// allows, as it does any order, and which keeps its level sorts cheap).
#[derive(Default)]
struct Latencies {
    counts: Vec<u64>,
    others: Vec<f64>,
}

impl Latencies {
    fn add(&mut self, latency_ms: f64) {
        let whole = latency_ms as usize;
        if latency_ms >= 0.0 && whole < LATENCY_BUCKETS && whole as f64 == latency_ms {
            if self.counts.is_empty() {
                self.counts = vec![0; LATENCY_BUCKETS];
            }
            self.counts[whole] += 1;
        } else if !latency_ms.is_nan() {
            self.others.push(latency_ms);
        }
    }

    fn sketch(&self) -> Option<KllSketch<KllFloat<f64>>> {
        if self.counts.is_empty() && self.others.is_empty() {
            return None;
        }
        let mut sketch = KllSketch::new(KLL_K).expect("KLL_K is valid");
        for (ms, &count) in self.counts.iter().enumerate() {
            let item = KllFloat::<f64>::new(ms as f64).expect("not NaN");
            for _ in 0..count {
                sketch.update(item);
            }
        }
        for &latency in &self.others {
            sketch.update(KllFloat::<f64>::new(latency).expect("NaN is never kept"));
        }
        Some(sketch)
    }
}

/// What one (topic, window) counted since the last drain.
#[derive(Default)]
pub struct WindowCounts {
    pub message_count: u64,
    pub byte_count: u64,
    pub failed_count: u64,
    pub hll: Option<HllSketch>,
    latencies: Latencies,
}

impl WindowCounts {
    /// The KLL sketch of the latencies counted (None if none was).
    pub fn latency_sketch(&self) -> Option<KllSketch<KllFloat<f64>>> {
        self.latencies.sketch()
    }
}

/// The windows of a tally, in the order they were first seen.
#[derive(Default)]
struct Windows {
    slots: Vec<(String, i64, WindowCounts)>,
    index: HashMap<String, HashMap<i64, usize>>,
    /// The slot of the previous record: consecutive records almost always share a window, and
    /// reusing it spares two map lookups per record.
    last: Option<usize>,
}

impl Windows {
    fn get(&mut self, topic: &str, start: i64) -> &mut WindowCounts {
        if let Some(i) = self.last {
            let (last_topic, last_start, _) = &self.slots[i];
            if *last_start == start && last_topic == topic {
                return &mut self.slots[i].2;
            }
        }
        let by_start = match self.index.get_mut(topic) {
            Some(by_start) => by_start,
            None => self.index.entry(topic.to_owned()).or_default(),
        };
        let slots = &mut self.slots;
        let i = *by_start.entry(start).or_insert_with(|| {
            slots.push((topic.to_owned(), start, WindowCounts::default()));
            slots.len() - 1
        });
        self.last = Some(i);
        &mut self.slots[i].2
    }
}

/// A client's counts; record* are called from librdkafka's threads, drain from the reporter's.
pub struct Tally {
    window_ms: i64,
    lg_k: u8,
    windows: Mutex<Windows>,
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
        Ok(Tally {
            window_ms: window_seconds * 1000,
            lg_k,
            windows: Mutex::new(Windows::default()),
        })
    }

    pub fn window_start(&self, timestamp_ms: i64) -> i64 {
        timestamp_ms - timestamp_ms.rem_euclid(self.window_ms)
    }

    fn with_window<R>(
        &self,
        topic: &str,
        timestamp_ms: i64,
        f: impl FnOnce(&mut WindowCounts) -> R,
    ) -> R {
        let start = self.window_start(timestamp_ms);
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(windows.get(topic, start))
    }

    /// Count one record (acknowledged or consumed), placed by its Kafka timestamp.
    pub fn record(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
        latency_ms: f64,
    ) {
        // Hash outside the lock: it is the per-record work.
        let hash = dedupe_key(key, value);
        let bytes = key.map_or(0, |k| k.len()) + value.map_or(0, |v| v.len());
        let lg_k = self.lg_k;
        self.with_window(topic, timestamp_ms, |counts| {
            counts.message_count += 1;
            counts.byte_count += bytes as u64;
            counts
                .hll
                .get_or_insert_with(|| {
                    HllSketch::new(lg_k, HllType::Hll8).expect("lg_k checked in new")
                })
                .update(hash);
            counts.latencies.add(latency_ms);
        });
    }

    /// Count one send that failed (not in message_count).
    pub fn record_failed(&self, topic: &str, timestamp_ms: i64) {
        self.with_window(topic, timestamp_ms, |counts| counts.failed_count += 1);
    }

    /// Everything counted since the previous drain, as (topic, window start ms, counts); the
    /// tally restarts.
    pub fn drain(&self) -> Vec<(String, i64, WindowCounts)> {
        let mut drained = {
            let mut guard = self
                .windows
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            std::mem::take(&mut *guard).slots
        };
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
        let hll = counts
            .hll
            .as_ref()
            .map(|s| s.serialize())
            .unwrap_or_default();
        out.extend_from_slice(&(hll.len() as u32).to_le_bytes());
        out.extend_from_slice(&hll);
        let kll = counts
            .latency_sketch()
            .map(|s| s.serialize())
            .unwrap_or_default();
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
            .map(|(t, s, c)| {
                (
                    t.as_str(),
                    *s,
                    c.message_count,
                    c.byte_count,
                    c.failed_count,
                )
            })
            .collect();
        assert_eq!(summary, vec![("t", 0, 1, 3, 0), ("t", 60_000, 2, 4, 1)]);
        assert!((drained[1].2.hll.as_ref().unwrap().estimate() - 1.0).abs() < 1e-9);
        assert_eq!(drained[1].2.latency_sketch().unwrap().n(), 2);
        assert!(drained[1].2.latency_sketch().is_some() && drained.len() == 2);
        assert!(tally.drain().is_empty());
    }

    #[test]
    fn latencies_keep_their_values_whole_or_not() {
        let mut latencies = Latencies::default();
        for ms in [3.0, 3.0, 0.0, 5000.0, 2.5, -1.0] {
            latencies.add(ms);
        }
        latencies.add(f64::NAN);
        let sketch = latencies.sketch().unwrap();
        assert_eq!(sketch.n(), 6);
        assert_eq!(sketch.min_item().map(|v| **v), Some(-1.0));
        assert_eq!(sketch.max_item().map(|v| **v), Some(5000.0));
        assert!(Latencies::default().sketch().is_none());
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(Tally::new(0, 12).is_err());
        assert!(Tally::new(60, 3).is_err());
        assert!(Tally::new(60, 22).is_err());
    }
}
