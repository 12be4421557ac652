package dev.uatu.audit.report;

import java.util.Iterator;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * A record's headers that also carry what {@link AuditProducerInterceptor} computed when the
 * record was sent: its dedupe key. Kafka clients 4.1 and later hand a record's own headers
 * object to {@code ProducerInterceptor.onAcknowledgement(metadata, exception, headers)}, so the
 * acknowledgement finds the key here and no send has to be matched to its acknowledgement
 * ({@link SendMatcher}, for older clients).
 *
 * <p>A view, not a copy: every {@link Headers} method reads and writes the application's own
 * headers object, so the header list that is serialized stays the application's, and the key,
 * a field, never goes over the wire. (A copy was most of the interceptor's 188 bytes a record
 * in an allocation profile of 4M sends; with the view it allocates 106.) The producer marks a
 * record's {@code RecordHeaders} read-only once the record is appended, which it cannot do
 * through this view: the application's headers object stays writable after the send.
 */
final class SentAudit implements Headers {
  private final Headers headers;
  final long dedupeKey; // SendMatcher.NO_MATCH: the key or value could not be hashed

  SentAudit(Headers headers, long dedupeKey) {
    this.headers = headers;
    this.dedupeKey = dedupeKey;
  }

  /**
   * {@code record} with {@code audit} as its headers, its timestamp left as it is: the
   * acknowledgement's metadata carries the timestamp the producer gave it. The producer reads a
   * record's headers through {@link ProducerRecord#headers()} only, and the constructors copy
   * the headers they are given, hence the subclass.
   */
  static <K, V> ProducerRecord<K, V> attach(ProducerRecord<K, V> record, SentAudit audit) {
    return new AuditedRecord<>(record, audit);
  }

  @Override
  public Headers add(Header header) {
    headers.add(header);
    return this;
  }

  @Override
  public Headers add(String key, byte[] value) {
    headers.add(key, value);
    return this;
  }

  @Override
  public Headers remove(String key) {
    headers.remove(key);
    return this;
  }

  @Override
  public Header lastHeader(String key) {
    return headers.lastHeader(key);
  }

  @Override
  public Iterable<Header> headers(String key) {
    return headers.headers(key);
  }

  @Override
  public Header[] toArray() {
    return headers.toArray();
  }

  @Override
  public Iterator<Header> iterator() {
    return headers.iterator();
  }

  @Override
  public String toString() {
    return headers.toString();
  }

  private static final class AuditedRecord<K, V> extends ProducerRecord<K, V> {
    private final SentAudit audit;

    AuditedRecord(ProducerRecord<K, V> record, SentAudit audit) {
      // ProducerRecord keeps a copy of the headers it is given; with none, null spares copying
      // an empty list (the copy is empty either way).
      super(
          record.topic(),
          record.partition(),
          record.timestamp(),
          record.key(),
          record.value(),
          audit.toArray().length == 0 ? null : audit);
      this.audit = audit;
    }

    @Override
    public Headers headers() {
      return audit;
    }
  }
}
