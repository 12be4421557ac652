package dev.uatu.dispatch;

import dev.uatu.sketch.KllSketches;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What one dispatch task saw, per window of wall-clock time ({@code stats_window_ms}): records
 * read, RPC attempts and their latencies, how each record ended, retries in memory, timeouts,
 * head-of-line reroutes and produce retries. The task returns it as summary rows ({@link
 * #SCHEMA}; the latencies as a DataSketches KLL doubles sketch, as Spark's kll_sketch_agg_double
 * builds it, so sketches merge with kll_merge_agg_double), which {@code
 * jobs/dispatch/transforms.py} turns into dispatch_stats.
 * Callback threads, timers and the task thread all record here, under this object's lock.
 */
final class DispatchStats {
  static final String SCHEMA =
      "topic string, partition int, window_start_ms long, records long, value_bytes long, "
          + "first_offset long, last_offset long, attempts long, committed long, skipped long, "
          + "retried long, dlq long, resq long, in_memory_retries long, timeouts long, "
          + "hol_rerouted long, produce_retries long, undecodable long, "
          + "latency_kll_sketch binary, latency_p50_ms double, latency_p95_ms double, "
          + "latency_p99_ms double, peak_inflight int, inflight_limit int, rate_limited_ms double";

  /** How a record ended in this run. */
  enum Outcome {
    COMMITTED,
    SKIPPED,
    RETRIED,
    DLQ,
    RESQ
  }

  private static final class Window {
    long records;
    long valueBytes;
    long attempts;
    long committed;
    long skipped;
    long retried;
    long dlq;
    long resq;
    long inMemoryRetries;
    long timeouts;
    long holRerouted;
    long produceRetries;
    long undecodable;
    KllDoublesSketch latencies; // null until the first call of the window
  }

  private final long windowMs;
  private final Map<Long, Window> windows = new TreeMap<>();

  DispatchStats(long windowMs) {
    this.windowMs = windowMs;
  }

  private Window at(long wallMs) {
    return windows.computeIfAbsent(wallMs - Math.floorMod(wallMs, windowMs), k -> new Window());
  }

  synchronized void read(int valueBytes, boolean undecodable) {
    Window w = at(System.currentTimeMillis());
    w.records++;
    w.valueBytes += valueBytes;
    if (undecodable) {
      w.undecodable++;
    }
  }

  synchronized void attempt(long wallMs) {
    at(wallMs).attempts++;
  }

  synchronized void latency(long startWallMs, long rttNanos) {
    Window w = at(startWallMs);
    if (w.latencies == null) {
      w.latencies = KllSketches.doubles();
    }
    w.latencies.update(rttNanos / 1e6);
  }

  synchronized void outcome(Outcome outcome) {
    Window w = at(System.currentTimeMillis());
    switch (outcome) {
      case COMMITTED -> w.committed++;
      case SKIPPED -> w.skipped++;
      case RETRIED -> w.retried++;
      case DLQ -> w.dlq++;
      case RESQ -> w.resq++;
      default -> throw new IllegalArgumentException(outcome.toString());
    }
  }

  synchronized void inMemoryRetry() {
    at(System.currentTimeMillis()).inMemoryRetries++;
  }

  synchronized void timeout() {
    at(System.currentTimeMillis()).timeouts++;
  }

  synchronized void holRerouted() {
    at(System.currentTimeMillis()).holRerouted++;
  }

  synchronized void produceRetry() {
    at(System.currentTimeMillis()).produceRetries++;
  }

  /** One row per window, in time order; task-level figures go on every row. */
  synchronized List<Row> rows(
      Range range, long firstOffset, long lastOffset, int peakInflight, int limit, double rateMs) {
    List<Row> rows = new ArrayList<>(windows.size());
    for (Map.Entry<Long, Window> e : windows.entrySet()) {
      Window w = e.getValue();
      rows.add(
          RowFactory.create(
              range.topic,
              range.partition,
              e.getKey(),
              w.records,
              w.valueBytes,
              firstOffset,
              lastOffset,
              w.attempts,
              w.committed,
              w.skipped,
              w.retried,
              w.dlq,
              w.resq,
              w.inMemoryRetries,
              w.timeouts,
              w.holRerouted,
              w.produceRetries,
              w.undecodable,
              w.latencies == null ? null : w.latencies.toByteArray(),
              KllSketches.quantile(w.latencies, 0.5),
              KllSketches.quantile(w.latencies, 0.95),
              KllSketches.quantile(w.latencies, 0.99),
              peakInflight,
              limit,
              rateMs));
    }
    return rows;
  }
}
