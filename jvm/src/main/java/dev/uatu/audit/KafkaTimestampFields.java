package dev.uatu.audit;

import dev.uatu.audit.report.XxHash64;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The audit fields of the default configuration (event time = the Kafka timestamp, dedupe key =
 * key and value) computed directly, without Spark's expressions: what {@link RecordProjection}
 * gives for that configuration, bit for bit ({@code tests/jobs/audit/test_audit_fold.py} holds
 * the two to the same partials), at a fraction of its cost per record (it was about a sixth of
 * the fold's CPU in a JFR profile, docs/benchmarks.md).
 *
 * <p>The SQL it stands for, with {@code ts} the Kafka timestamp in milliseconds and {@code
 * audit} the batch's audit time: {@code event = ts if 0 < ts <= audit + skew else null};
 * {@code placed = coalesce(event, audit)}; {@code latency = audit - event}; {@code bytes =
 * len(key) + len(value)} (null counts 0); {@code dedupe = xxhash64(key, value)}.
 */
final class KafkaTimestampFields implements RecordFields {
  private static final long serialVersionUID = 1L;

  private final long maxFutureSkewMs;
  private long bytes;
  private long dedupeKey;
  private long placedMs;
  private boolean timed;
  private double latencyMs;

  KafkaTimestampFields(long maxFutureSkewMs) {
    this.maxFutureSkewMs = maxFutureSkewMs;
  }

  @Override
  public void evaluate(ConsumerRecord<byte[], byte[]> record, long auditMicros) {
    long auditMs = Math.floorDiv(auditMicros, 1000L);
    long ts = record.timestamp();
    // Spark's Kafka source turns the timestamp into microseconds with an exact multiply: a
    // timestamp past year 294,247 fails the task there, so it does here too.
    Math.multiplyExact(ts, 1000L);
    byte[] key = record.key();
    byte[] value = record.value();
    bytes = (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
    dedupeKey = XxHash64.dedupeKey(key, value);
    // The SQL compares the event time as a double against a long bound; for any timestamp a
    // clock can give, the comparison is exact either way.
    timed = ts > 0 && ts <= auditMs + maxFutureSkewMs;
    placedMs = timed ? ts : auditMs;
    latencyMs = timed ? (double) (auditMs - ts) : 0;
  }

  @Override
  public long bytes() {
    return bytes;
  }

  @Override
  public long dedupeKey() {
    return dedupeKey;
  }

  @Override
  public boolean hasEventTime() {
    return timed;
  }

  @Override
  public long placedMs() {
    return placedMs;
  }

  @Override
  public boolean hasLatency() {
    return timed;
  }

  @Override
  public double latencyMs() {
    return latencyMs;
  }
}
