package dev.uatu.fold;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Queue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Byte-array consumers that live as long as the executor JVM, pooled per configuration: a
 * fold task per partition and micro-batch would otherwise pay a consumer's connection and
 * metadata set-up every time. Consumers are not thread-safe, so a task borrows one and gives
 * it back.
 *
 * <p>Pooled consumers wait at most {@link #FETCH_MAX_WAIT_MS} for a fetch, whatever the
 * configuration says. A consumer given back right after reading a range to the end of its
 * partition has already sent its next fetch, which the broker holds for {@code
 * fetch.max.wait.ms} (500 ms by default) as it has nothing to return; the task that borrows the
 * consumer next cannot send its own fetch until that answer comes. A fold reads ranges Spark
 * planned from offsets the broker reported, so it never needs the broker to wait for records.
 */
public final class Consumers {
  /** The pooled consumers' {@code fetch.max.wait.ms}. */
  public static final String FETCH_MAX_WAIT_MS = "10";

  private static final Map<Map<String, String>, Queue<KafkaConsumer<byte[], byte[]>>> IDLE =
      new ConcurrentHashMap<>();

  private Consumers() {}

  public static KafkaConsumer<byte[], byte[]> borrow(Map<String, String> config) {
    KafkaConsumer<byte[], byte[]> consumer = idle(config).poll();
    if (consumer != null) {
      return consumer;
    }
    Properties props = new Properties();
    props.putAll(config);
    props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, FETCH_MAX_WAIT_MS);
    return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  public static void giveBack(Map<String, String> config, KafkaConsumer<byte[], byte[]> consumer) {
    consumer.unsubscribe();
    idle(config).add(consumer);
  }

  /** Close every pooled consumer (a driver that ran folds in-process, like a test session). */
  public static void closeAll() {
    IDLE.values().forEach(q -> q.forEach(KafkaConsumer::close));
    IDLE.clear();
  }

  private static Queue<KafkaConsumer<byte[], byte[]>> idle(Map<String, String> config) {
    return IDLE.computeIfAbsent(new HashMap<>(config), c -> new ConcurrentLinkedQueue<>());
  }
}
