package dev.uatu.audit.report;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * A Kafka {@link ConsumerInterceptor} that reports, per (topic, window of the record
 * timestamp), every record {@code poll} returned: tier CONSUMER with the consumer's group.id,
 * the Java twin of Python's {@code clients.AuditedConsumer}. Enable it with
 * {@code interceptor.classes=dev.uatu.audit.report.AuditConsumerInterceptor} and the
 * {@link AuditSettings} {@code uatu.audit.*} settings.
 *
 * <p>The dedupe key is Spark's {@code xxhash64(key, value)} of the record's bytes: keys and
 * values deserialized as byte[] or ByteBuffer are hashed as they are, Strings as UTF-8 (what
 * StringDeserializer decoded); other types are counted without a dedupe key. Latency is poll
 * time minus the record timestamp.
 */
public final class AuditConsumerInterceptor implements ConsumerInterceptor<Object, Object> {
  private AuditTally tally;
  private AuditReporter reporter;

  @Override
  public void configure(Map<String, ?> configs) {
    AuditSettings settings = AuditSettings.from(configs, AuditReports.TIER_CONSUMER);
    Object group = configs.get(ConsumerConfig.GROUP_ID_CONFIG);
    tally = new AuditTally(settings.windowSeconds(), settings.lgK());
    reporter = new AuditReporter(tally, settings, group == null ? "" : group.toString());
  }

  private static byte[] bytes(Object data) {
    if (data == null) {
      return null;
    }
    if (data instanceof byte[] b) {
      return b;
    }
    if (data instanceof ByteBuffer buf) {
      byte[] b = new byte[buf.remaining()];
      buf.duplicate().get(b);
      return b;
    }
    if (data instanceof String s) {
      return s.getBytes(StandardCharsets.UTF_8);
    }
    throw new IllegalArgumentException("not hashable");
  }

  @Override
  public ConsumerRecords<Object, Object> onConsume(ConsumerRecords<Object, Object> records) {
    long now = System.currentTimeMillis();
    for (ConsumerRecord<Object, Object> r : records) {
      long size = Math.max(0, r.serializedKeySize()) + Math.max(0, r.serializedValueSize());
      try {
        long hash = XxHash64.dedupeKey(bytes(r.key()), bytes(r.value()));
        tally.add(r.topic(), r.timestamp(), size, hash, (double) (now - r.timestamp()));
      } catch (IllegalArgumentException e) {
        tally.addUnkeyed(r.topic(), r.timestamp(), size);
      }
    }
    return records;
  }

  @Override
  public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

  /** Sends the reports counted so far; returns how many are still unsent. */
  public int flush() {
    return reporter.flush();
  }

  @Override
  public void close() {
    if (reporter != null) {
      reporter.close();
    }
  }
}
