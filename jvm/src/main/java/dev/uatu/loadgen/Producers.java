package dev.uatu.loadgen;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Producers that live as long as the executor JVM, one per configuration and shared by its
 * tasks (the producer is thread-safe): a producer per task and micro-batch would pay its
 * connection and metadata set-up every time.
 */
public final class Producers {
  private static final Map<Map<String, String>, KafkaProducer<byte[], byte[]>> PRODUCERS =
      new ConcurrentHashMap<>();

  private Producers() {}

  static KafkaProducer<byte[], byte[]> get(Map<String, String> config) {
    return PRODUCERS.computeIfAbsent(
        new HashMap<>(config),
        c -> {
          Properties props = new Properties();
          props.putAll(c);
          return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        });
  }

  /** Drops a producer after a failed delivery, so the next batch starts with a fresh one. */
  static void discard(Map<String, String> config, KafkaProducer<byte[], byte[]> producer) {
    if (PRODUCERS.remove(config, producer)) {
      producer.close(Duration.ZERO);
    }
  }

  /** Close every cached producer (a driver that ran the generator in-process, like a test). */
  public static void closeAll() {
    PRODUCERS.values().forEach(KafkaProducer::close);
    PRODUCERS.clear();
  }
}
