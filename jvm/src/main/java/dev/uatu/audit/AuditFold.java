package dev.uatu.audit;

import dev.uatu.sketch.KllSketches;
import dev.uatu.fold.FoldRange;
import dev.uatu.fold.RecordFold;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.datasketches.hll.HllSketch;
import org.apache.datasketches.hll.TgtHllType;
import org.apache.datasketches.hll.Union;
import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The audit of one partition's offset range in one micro-batch (one Spark task): every record
 * folded into the partial aggregate of its window, per window length, the way
 * {@code jobs.audit.transforms.assign_windows} and {@code window_partials} define it in SQL:
 * records, key + value bytes, records without a usable event time, late records, an HLL_8
 * sketch of the dedupe keys and a KLL sketch of the latencies, both in the formats Spark's
 * {@code hll_sketch_agg} and {@code kll_sketch_agg_double} write; for exact audits, the keys new
 * to their window ({@link PartitionKeys}), or, for a window whose keys are past their retention,
 * how many records had their uniqueness left to the sketch ({@code unique_estimated_count}).
 * The record's own fields come from Spark's expressions
 * ({@link RecordFields}: Spark's own expressions, or their direct equivalent for the default
 * configuration).
 *
 * <p>Rows ({@link #ROW_SCHEMA}), each with the range's topic and partition: one per window and
 * audit type, then one summary row of the range (null audit_type) with the records read and the
 * exact keys' state figures (windows and keys in memory, the keys per window in memory, windows
 * dropped by retention, the oldest window kept on disk).
 */
final class AuditFold implements RecordFold {
  static final String ROW_SCHEMA =
      "topic string, partition int, audit_type string, audit_interval_seconds int, "
          + "window_start_ms long, window_end_ms long, message_count long, bytes long, no_event_time_count long, "
          + "late_count long, hll_sketch binary, latency_kll_sketch binary, "
          + "new_unique_count long, unique_estimated_count long, records_read long, "
          + "bytes_read long, state_watermark_ms long, "
          + "state_windows long, state_keys long, state_memory_bytes long, "
          + "state_windows_read long, state_bytes_written long, state_windows_dropped long, "
          + "state_oldest_window_ms long, state_window_keys string";

  private final FoldSettings settings;
  private final String topic;
  private final int partition;
  private final long auditMs;
  private final long auditMicros;
  private final RecordFields fields;
  private final PartitionKeys keys; // null without an exact audit
  private final List<Map<Long, WindowPartial>> windows = new ArrayList<>();
  private final long[] lastStart;
  private final WindowPartial[] last;
  private long records;
  private long bytesRead;
  private long newestPlacedMs = Long.MIN_VALUE;

  AuditFold(FoldSettings settings, FoldRange range, long batchId, long auditMs) {
    this.settings = settings;
    this.topic = range.topic();
    this.partition = range.partition();
    this.auditMs = auditMs;
    this.auditMicros = auditMs * 1000L;
    this.fields = settings.fields;
    this.keys =
        settings.keysDir == null
            ? null
            : PartitionKeys.checkOut(
                settings.keysDirOf(topic), settings.hadoopConf.value(), partition, batchId);
    int n = settings.intervals.length;
    for (int i = 0; i < n; i++) {
      windows.add(new HashMap<>());
    }
    lastStart = new long[n];
    last = new WindowPartial[n];
  }

  @Override
  public void add(ConsumerRecord<byte[], byte[]> record, long fetchMicros) {
    RecordFields p = fields;
    p.evaluate(record, auditMicros);
    long bytes = p.bytes();
    long key = p.dedupeKey();
    boolean untimed = !p.hasEventTime();
    long placed = p.placedMs();
    boolean timed = p.hasLatency();
    double latency = timed ? p.latencyMs() : 0;
    records++;
    bytesRead += bytes;
    if (placed > newestPlacedMs) {
      newestPlacedMs = placed;
    }
    FoldSettings.Interval[] intervals = settings.intervals;
    for (int i = 0; i < intervals.length; i++) {
      FoldSettings.Interval interval = intervals[i];
      long start = placed - Math.floorMod(placed, interval.ms);
      WindowPartial w = last[i];
      if (w == null || lastStart[i] != start) {
        w = windows.get(i).get(start);
        if (w == null) {
          w = new WindowPartial(start, interval, settings.hllLgConfigK);
          if (interval.exact) {
            w.keys = keys.window(interval.seconds, start, interval.retentionMs);
            w.keysExpired = w.keys == null;
          }
          windows.get(i).put(start, w);
        }
        last[i] = w;
        lastStart[i] = start;
      }
      w.messages++;
      w.bytes += bytes;
      if (untimed) {
        w.untimed++;
      }
      if (auditMs > w.endMs + interval.latenessMs) {
        w.late++;
      }
      w.hll.update(key);
      if (timed) {
        if (w.kll == null) {
          w.kll = KllSketches.doubles();
        }
        w.kll.update(latency);
      }
      if (w.keys != null) {
        if (w.keys.add(key)) {
          w.newUnique++;
        }
      } else if (w.keysExpired) {
        w.estimated++;
      }
    }
  }

  @Override
  public List<Row> finish() {
    List<Row> rows = new ArrayList<>();
    FoldSettings.Interval[] intervals = settings.intervals;
    for (int i = 0; i < intervals.length; i++) {
      FoldSettings.Interval interval = intervals[i];
      for (WindowPartial w : new TreeMap<>(windows.get(i)).values()) {
        byte[] hll = hllBytes(w.hll, settings.hllLgConfigK);
        byte[] kll = w.kll == null ? null : KllSketches.image(w.kll);
        for (String auditType : interval.auditTypes) {
          boolean exact = FoldSettings.EXACT.equals(auditType);
          rows.add(
              RowFactory.create(
                  topic, partition, auditType, interval.seconds, w.startMs, w.endMs, w.messages,
                  w.bytes, w.untimed, w.late, hll, kll, exact ? w.newUnique : 0L,
                  exact ? w.estimated : 0L,
                  null, null, null, null, null, null, null, null, null, null, null));
        }
      }
    }
    Map<Integer, Long> lateness = new HashMap<>();
    Map<Integer, Long> retention = new HashMap<>();
    for (FoldSettings.Interval interval : intervals) {
      lateness.put(interval.seconds, interval.latenessMs);
      if (interval.exact) {
        retention.put(interval.seconds, interval.retentionMs);
      }
    }
    Long watermark = null;
    Long stateWindows = null;
    Long stateKeys = null;
    Long memory = null;
    Long read = null;
    Long written = null;
    Long dropped = null;
    Long oldest = null;
    String windowKeys = null;
    if (keys != null) {
      keys.checkIn(newestPlacedMs, auditMs, lateness, retention);
      watermark = keys.watermarkMs();
      stateWindows = keys.windowsInMemory();
      stateKeys = keys.keysInMemory();
      memory = keys.memoryBytes();
      read = keys.windowsRead();
      written = keys.bytesWritten();
      dropped = keys.windowsDropped();
      oldest = keys.oldestWindowMs();
      windowKeys = keys.windowKeys();
    }
    rows.add(
        RowFactory.create(
            topic, partition, null, null, null, null, null, null, null, null, null, null, null,
            null, records, bytesRead, watermark, stateWindows, stateKeys, memory, read, written,
            dropped, oldest, windowKeys));
    return rows;
  }

  /**
   * Spark's bytes for this sketch: hll_sketch_agg merges each partial aggregate into an empty
   * buffer through a Union and writes the result's updatable image (HllSketchAgg.merge/eval).
   */
  static byte[] hllBytes(HllSketch partial, int lgConfigK) {
    Union union = new Union(lgConfigK);
    union.update(new HllSketch(lgConfigK, TgtHllType.HLL_8));
    union.update(partial);
    return union.getResult(TgtHllType.HLL_8).toUpdatableByteArray();
  }

  /** One window of one length: the partial aggregate of the range's records in it. */
  private static final class WindowPartial {
    final long startMs;
    final long endMs;
    final HllSketch hll;
    KllDoublesSketch kll;
    PartitionKeys.WindowKeys keys; // null: no exact audit, or keysExpired
    boolean keysExpired; // an exact audit's window past its key retention
    long messages;
    long bytes;
    long untimed;
    long late;
    long newUnique;
    long estimated; // records whose uniqueness the sketch decides (keysExpired)

    WindowPartial(long startMs, FoldSettings.Interval interval, int lgConfigK) {
      this.startMs = startMs;
      this.endMs = startMs + interval.ms;
      this.hll = new HllSketch(lgConfigK, TgtHllType.HLL_8);
    }
  }
}
