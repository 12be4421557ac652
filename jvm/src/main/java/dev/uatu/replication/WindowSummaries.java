package dev.uatu.replication;

import dev.uatu.sketch.KllSketches;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.IntToLongFunction;
import org.apache.datasketches.kll.KllLongsSketch;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * One task's records, summed per epoch-aligned window of source timestamps: the summary rows
 * (Python's {@code writer.SUMMARY_SCHEMA}) that become {@code replication_stats} and
 * {@code replication_audit}. Metrics follow MirrorMaker 2: record age = read time - source
 * timestamp; replication latency = ack time - source timestamp; byte counts are value bytes
 * (plus key bytes in {@code record_bytes_replicated}, which flow control uses).
 */
public final class WindowSummaries {
  private final long intervalMs;
  private final TreeMap<Long, Window> windows = new TreeMap<>();
  // Records come in offset order, so nearly all fall in the window of the one before.
  private long lastStart = Long.MIN_VALUE;
  private Window last;

  public WindowSummaries(long intervalMs) {
    this.intervalMs = intervalMs;
  }

  /**
   * Count one record read from the source. {@code ackIndex} is its number in the task's
   * {@link AckTimes}, or -1 when the destination already held it and it was not sent.
   */
  public void add(
      long offset, long timestampMs, long readMs, int keyBytes, int valueBytes, int ackIndex) {
    long start = timestampMs - Math.floorMod(timestampMs, intervalMs);
    if (last == null || start != lastStart) {
      last = windows.computeIfAbsent(start, k -> new Window());
      lastStart = start;
    }
    last.add(offset, timestampMs, readMs, keyBytes, valueBytes, ackIndex);
  }

  /**
   * The summary rows, in window order; {@code ackTime} maps an ack index to its ack time. A
   * window's replication latencies come as their min, sum and max and a KLL sketch in the form
   * Spark's {@code kll_sketch_agg_bigint} writes (null when nothing was written), so the
   * driver sums and merges them without another Spark job.
   */
  public List<Row> rows(int partition, int destinationPartition, IntToLongFunction ackTime) {
    List<Row> rows = new ArrayList<>(windows.size());
    for (Map.Entry<Long, Window> e : windows.entrySet()) {
      Window w = e.getValue();
      KllLongsSketch sketch = KllSketches.longs();
      long latencyMin = Long.MAX_VALUE;
      long latencySum = 0;
      long latencyMax = Long.MIN_VALUE;
      for (int i = 0; i < w.written; i++) {
        long latency = ackTime.applyAsLong(w.ackIndex[i]) - w.writtenTimestampMs[i];
        sketch.update(latency);
        latencyMin = Math.min(latencyMin, latency);
        latencySum += latency;
        latencyMax = Math.max(latencyMax, latency);
      }
      boolean written = w.written > 0;
      rows.add(
          RowFactory.create(
              partition,
              destinationPartition,
              e.getKey(),
              w.read,
              (long) w.written,
              w.read - w.written,
              w.valueBytes,
              w.recordBytes,
              w.firstOffset,
              w.lastOffset,
              w.ageMin,
              w.ageSum,
              w.ageMax,
              written ? latencyMin : null,
              latencySum,
              written ? latencyMax : null,
              written ? KllSketches.image(sketch) : null));
    }
    return rows;
  }

  /** For tests: the rows with ack times from an array indexed by ack index. */
  public List<Row> rows(int partition, int destinationPartition, long[] ackTimes) {
    return rows(partition, destinationPartition, i -> ackTimes[i]);
  }

  private static final class Window {
    long read;
    int written;
    long valueBytes;
    long recordBytes;
    long firstOffset = Long.MAX_VALUE;
    long lastOffset = Long.MIN_VALUE;
    long ageMin = Long.MAX_VALUE;
    long ageSum;
    long ageMax = Long.MIN_VALUE;
    int[] ackIndex = new int[16];
    long[] writtenTimestampMs = new long[16];

    void add(long offset, long timestampMs, long readMs, int keyLength, int valueLength, int ack) {
      read++;
      firstOffset = Math.min(firstOffset, offset);
      lastOffset = Math.max(lastOffset, offset);
      long age = readMs - timestampMs;
      ageMin = Math.min(ageMin, age);
      ageSum += age;
      ageMax = Math.max(ageMax, age);
      if (ack < 0) {
        return; // already in the destination: read, not written
      }
      if (written == ackIndex.length) {
        ackIndex = Arrays.copyOf(ackIndex, written * 2);
        writtenTimestampMs = Arrays.copyOf(writtenTimestampMs, written * 2);
      }
      ackIndex[written] = ack;
      writtenTimestampMs[written] = timestampMs;
      written++;
      valueBytes += valueLength;
      recordBytes += (long) keyLength + valueLength;
    }
  }
}
