package dev.uatu.audit.report;

import dev.uatu.sketch.KllSketches;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.apache.datasketches.hll.HllSketch;
import org.apache.datasketches.hll.TgtHllType;
import org.apache.datasketches.kll.KllDoublesSketch;

/**
 * Per (topic, epoch-aligned window of the record timestamp) counts of one reporter: messages,
 * key + value bytes, failed sends, an HLL_8 sketch of the dedupe keys and a KLL doubles sketch
 * of latency, in the formats Spark's hll_sketch_agg and kll_sketch_agg_double write. The Java
 * twin of Python's {@code core.audit_reports.WindowTally}; thread-safe.
 */
public final class AuditTally {
  /** What one (topic, window) counted since the last drain. */
  public static final class Counts {
    public long messages;
    public long bytes;
    public long failed;
    public HllSketch hll;
    /** The latency sketch; set by {@link #drain} from the latencies recorded. */
    public KllDoublesSketch kll;
    // Latencies are whole milliseconds, mostly small: counted per value here and fed to the
    // KLL sketch with weights at drain, off the acknowledging thread (a KLL update per record
    // was a third of the interceptor's cost on the producer's I/O thread).
    private long[] latencyCounts;
    private double[] otherLatencies;
    private int otherCount;

    void addLatency(double latencyMs) {
      int whole = (int) latencyMs;
      if (whole == latencyMs && whole >= 0 && whole < LATENCY_BUCKETS) {
        if (latencyCounts == null) {
          latencyCounts = new long[LATENCY_BUCKETS];
        }
        latencyCounts[whole]++;
        return;
      }
      if (otherLatencies == null) {
        otherLatencies = new double[64];
      } else if (otherCount == otherLatencies.length) {
        otherLatencies = Arrays.copyOf(otherLatencies, otherCount * 2);
      }
      otherLatencies[otherCount++] = latencyMs;
    }

    void buildLatencySketch() {
      if (latencyCounts == null && otherCount == 0) {
        return;
      }
      kll = KllSketches.doubles();
      if (latencyCounts != null) {
        for (int ms = 0; ms < LATENCY_BUCKETS; ms++) {
          if (latencyCounts[ms] > 0) {
            kll.update(ms, latencyCounts[ms]);
          }
        }
      }
      if (otherCount > 0) {
        kll.update(otherLatencies, 0, otherCount);
      }
      latencyCounts = null;
      otherLatencies = null;
      otherCount = 0;
    }
  }

  private static final int LATENCY_BUCKETS = 4096;

  /** A (topic, window start) pair. */
  public record Window(String topic, long startMs) {}

  private final long lengthMs;
  private final int lgK;
  private Map<Window, Counts> windows = new HashMap<>();
  // The window the previous record went to: consecutive records almost always share it, and
  // reusing it spares a Window and a map lookup per record.
  private String lastTopic;
  private long lastStartMs;
  private Counts lastCounts;

  public AuditTally(int windowSeconds, int lgK) {
    this.lengthMs = windowSeconds * 1000L;
    this.lgK = lgK;
  }

  public int windowSeconds() {
    return (int) (lengthMs / 1000);
  }

  private Counts window(String topic, long timestampMs) {
    long start = timestampMs - Math.floorMod(timestampMs, lengthMs);
    if (lastCounts != null && start == lastStartMs && topic.equals(lastTopic)) {
      return lastCounts;
    }
    lastCounts = windows.computeIfAbsent(new Window(topic, start), w -> new Counts());
    lastTopic = topic;
    lastStartMs = start;
    return lastCounts;
  }

  /** Count one acknowledged or consumed record; latencyMs < 0 means not measured. */
  public synchronized void add(
      String topic, long timestampMs, long bytes, long dedupeKey, double latencyMs) {
    Counts c = window(topic, timestampMs);
    c.messages++;
    c.bytes += bytes;
    if (c.hll == null) {
      c.hll = new HllSketch(lgK, TgtHllType.HLL_8);
    }
    c.hll.update(dedupeKey);
    if (latencyMs >= 0) {
      c.addLatency(latencyMs);
    }
  }

  /** Count one record whose dedupe key is unknown (no HLL update, no latency). */
  public synchronized void addUnkeyed(String topic, long timestampMs, long bytes) {
    Counts c = window(topic, timestampMs);
    c.messages++;
    c.bytes += bytes;
  }

  /** Count one send that failed. */
  public synchronized void addFailed(String topic, long timestampMs) {
    window(topic, timestampMs).failed++;
  }

  /** Everything counted since the previous drain, latency sketches built; the tally restarts. */
  public Map<Window, Counts> drain() {
    Map<Window, Counts> drained;
    synchronized (this) {
      drained = windows;
      windows = new HashMap<>();
      lastCounts = null;
    }
    for (Counts c : drained.values()) {
      c.buildLatencySketch(); // no other thread sees these any more
    }
    return drained;
  }

  public int lgK() {
    return lgK;
  }
}
