package dev.uatu.audit.report;

import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * A record's headers that also carry what {@link AuditProducerInterceptor} computed when the
 * record was sent: its dedupe key. Kafka clients 4.1 and later hand a record's own headers
 * object to {@code ProducerInterceptor.onAcknowledgement(metadata, exception, headers)}, so the
 * acknowledgement finds the key here and no send has to be matched to its acknowledgement
 * ({@link SendMatcher}, for older clients).
 *
 * <p>The key is a field, not a header: the producer serializes only the header list, which
 * stays the application's own, so nothing extra goes over the wire.
 */
final class SentAudit extends RecordHeaders {
  final long dedupeKey; // SendMatcher.NO_MATCH: the key or value could not be hashed

  SentAudit(Headers headers, long dedupeKey) {
    super(headers.toArray());
    this.dedupeKey = dedupeKey;
  }

  /**
   * {@code record} with {@code timestampMs} and {@code audit} as its headers. The producer reads
   * a record's headers through {@link ProducerRecord#headers()} only, and the constructors copy
   * the headers they are given into a plain {@link RecordHeaders}, hence the subclass.
   */
  static <K, V> ProducerRecord<K, V> attach(
      ProducerRecord<K, V> record, long timestampMs, SentAudit audit) {
    return new AuditedRecord<>(record, timestampMs, audit);
  }

  private static final class AuditedRecord<K, V> extends ProducerRecord<K, V> {
    private final SentAudit audit;

    AuditedRecord(ProducerRecord<K, V> record, long timestampMs, SentAudit audit) {
      super(record.topic(), record.partition(), timestampMs, record.key(), record.value(), audit);
      this.audit = audit;
    }

    @Override
    public Headers headers() {
      return audit;
    }
  }
}
