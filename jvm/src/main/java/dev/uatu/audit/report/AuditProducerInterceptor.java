package dev.uatu.audit.report;

import java.util.Map;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Utils;

/**
 * A Kafka {@link ProducerInterceptor} that reports, per (topic, window), what the broker
 * acknowledged: tier SERVICE (or KRP), the Java twin of Python's {@code clients.AuditedProducer}.
 * Enable it on any Java producer with
 *
 * <pre>
 *   interceptor.classes=dev.uatu.audit.report.AuditProducerInterceptor
 *   uatu.audit.service=orders-api  uatu.audit.cluster=local  uatu.audit.topic=uatu-audit
 * </pre>
 *
 * (see {@link AuditSettings} for the rest). Contract:
 *
 * <ul>
 *   <li>A record counts in the window of the timestamp the broker stores: the acknowledgement's
 *       (on clients before 4.1, a record produced without a timestamp gets "now" here, what the
 *       producer would give it, so that its acknowledgement can be matched).
 *   <li>The dedupe key is Spark's {@code xxhash64(key, value)} of the serialized key and value
 *       (the producer's own key.serializer / value.serializer), the audit job's default.
 *   <li>A record counts when its acknowledgement arrives without error (message count, key +
 *       value bytes, HLL of dedupe keys, KLL of ack latency); a failed send counts in
 *       failed_count.
 *   <li>How an acknowledgement finds its record's dedupe key depends on the Kafka client:
 *       <ul>
 *         <li>4.1 and later: the record is sent with a {@link SentAudit} as its headers (the
 *             application's headers, plus the key in a field that is never serialized), and
 *             the producer hands those headers to the acknowledgement. List this interceptor
 *             last in interceptor.classes: an interceptor after it that copies the record
 *             drops the field, and its records are counted without their key.
 *         <li>Older clients: acknowledgements are matched to sends by (topic, timestamp, key
 *             size, value size) ({@link SendMatcher}); a send whose acknowledgement never
 *             matches (a LogAppendTime topic, a record failed before it got a partition) is
 *             counted without its dedupe key, and dropped from the pending set after 10
 *             minutes.
 *       </ul>
 *   <li>Threads: the sending thread hashes the record; the counting (and, before 4.1, the
 *       matching) runs on the producer's I/O thread, where acknowledgements arrive.
 *   <li>Reports go to uatu.audit.topic every report interval and at close; see
 *       {@link AuditReporter}.
 * </ul>
 */
public final class AuditProducerInterceptor implements ProducerInterceptor<Object, Object> {
  private static final long PENDING_TTL_MS = 600_000L;
  // Kafka clients 4.1 added onAcknowledgement(metadata, exception, headers), and their producer
  // calls it, with the record's headers, instead of the two-argument form.
  static final boolean ACK_GETS_HEADERS = ackGetsHeaders();

  private final SendMatcher sends = new SendMatcher();
  private Serializer<Object> keySerializer;
  private Serializer<Object> valueSerializer;
  private AuditTally tally;
  private AuditReporter reporter;

  @Override
  public void configure(Map<String, ?> configs) {
    AuditSettings settings = AuditSettings.from(configs, AuditReports.TIER_SERVICE);
    keySerializer = serializer(configs.get(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG));
    valueSerializer = serializer(configs.get(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG));
    if (keySerializer != null) {
      keySerializer.configure(configs, true);
    }
    if (valueSerializer != null) {
      valueSerializer.configure(configs, false);
    }
    tally = new AuditTally(settings.windowSeconds(), settings.lgK());
    reporter = new AuditReporter(tally, settings, "");
  }

  private static boolean ackGetsHeaders() {
    try {
      ProducerInterceptor.class.getMethod(
          "onAcknowledgement", RecordMetadata.class, Exception.class, Headers.class);
      return true;
    } catch (NoSuchMethodException e) {
      return false;
    }
  }

  @SuppressWarnings("unchecked")
  private static Serializer<Object> serializer(Object configured) {
    try {
      if (configured instanceof Class<?> c) {
        return (Serializer<Object>) Utils.newInstance(c);
      }
      if (configured instanceof String s && !s.isBlank()) {
        return (Serializer<Object>) Utils.newInstance(s, Serializer.class);
      }
    } catch (ClassNotFoundException e) {
      throw new IllegalArgumentException("serializer " + configured + " not found", e);
    }
    return null; // only byte[] and String keys/values can then be hashed
  }

  private static byte[] bytes(Serializer<Object> serializer, String topic, ProducerRecord<?, ?> r,
      Object data) {
    if (data == null) {
      return null;
    }
    if (data instanceof byte[] b) {
      return b;
    }
    if (serializer != null) {
      return serializer.serialize(topic, r.headers(), data);
    }
    return data.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8);
  }

  @Override
  public ProducerRecord<Object, Object> onSend(ProducerRecord<Object, Object> record) {
    long hash = SendMatcher.NO_MATCH;
    int keySize = -1;
    int valueSize = -1;
    try {
      byte[] key = bytes(keySerializer, record.topic(), record, record.key());
      byte[] value = bytes(valueSerializer, record.topic(), record, record.value());
      keySize = key == null ? -1 : key.length;
      valueSize = value == null ? -1 : value.length;
      hash = XxHash64.dedupeKey(key, value);
    } catch (RuntimeException e) {
      // Never fail the application's send: the record is counted on ack without its key.
    }
    if (ACK_GETS_HEADERS) {
      return SentAudit.attach(record, new SentAudit(record.headers(), hash));
    }
    long now = System.currentTimeMillis();
    long timestamp = record.timestamp() == null ? now : record.timestamp();
    if (hash != SendMatcher.NO_MATCH) {
      sends.sent(record.topic(), timestamp, keySize, valueSize, hash, now);
    }
    if (record.timestamp() != null) {
      return record;
    }
    return new ProducerRecord<>(
        record.topic(), record.partition(), now, record.key(), record.value(), record.headers());
  }

  /** Kafka clients before 4.1: the dedupe key comes from the send this ack matches. */
  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    if (metadata == null || exception != null) {
      count(metadata, exception, SendMatcher.NO_MATCH);
      return;
    }
    count(
        metadata,
        null,
        sends.match(
            metadata.topic(), metadata.timestamp(), metadata.serializedKeySize(),
            metadata.serializedValueSize()));
  }

  /**
   * Kafka clients 4.1 and later call this instead, with the record's own headers: the {@link
   * SentAudit} that {@link #onSend} attached carries the dedupe key. (Compiled against older
   * clients, where it overrides nothing and is never called.)
   */
  public void onAcknowledgement(RecordMetadata metadata, Exception exception, Headers headers) {
    count(
        metadata, exception,
        headers instanceof SentAudit sent ? sent.dedupeKey : SendMatcher.NO_MATCH);
  }

  private void count(RecordMetadata metadata, Exception exception, long hash) {
    if (metadata == null) {
      return;
    }
    long now = System.currentTimeMillis();
    if (exception != null) {
      long ts = metadata.timestamp() >= 0 ? metadata.timestamp() : now;
      tally.addFailed(metadata.topic(), ts);
      return;
    }
    long bytes = Math.max(0, metadata.serializedKeySize())
        + Math.max(0, metadata.serializedValueSize());
    if (hash == SendMatcher.NO_MATCH) {
      tally.addUnkeyed(metadata.topic(), metadata.timestamp(), bytes);
    } else {
      tally.add(metadata.topic(), metadata.timestamp(), bytes, hash, now - metadata.timestamp());
    }
  }

  /** Sends the reports counted so far; returns how many are still unsent (tests, close). */
  public int flush() {
    sends.prune(System.currentTimeMillis(), PENDING_TTL_MS);
    return reporter.flush();
  }

  @Override
  public void close() {
    if (reporter != null) {
      reporter.close();
    }
    if (keySerializer != null) {
      keySerializer.close();
    }
    if (valueSerializer != null) {
      valueSerializer.close();
    }
  }
}
