package dev.uatu.audit;

import java.io.Serializable;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * A record's audit fields, as {@code jobs.audit.transforms.audit_records} defines them: key +
 * value bytes, the dedupe hash, the usable event time (if any), the time that places the record
 * in its window, and the latency. {@link #evaluate} computes them for one record; the getters
 * read them until the next call. Not thread-safe: one per fold task.
 */
interface RecordFields extends Serializable {
  void evaluate(ConsumerRecord<byte[], byte[]> record, long auditMicros);

  long bytes();

  long dedupeKey();

  boolean hasEventTime();

  long placedMs();

  boolean hasLatency();

  double latencyMs();
}
